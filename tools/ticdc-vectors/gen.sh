#!/bin/sh
# Regenerates tests/cases/ticdc_*/events.jsonl from specs/*.json (README.md says how the
# messages are made). Needs Go and the Go module proxy.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cases="$here/../../tests/cases"
cd "$here"
GOFLAGS=-mod=mod go build -o "${TMPDIR:-/tmp}/ticdc-vectors" .
for spec in specs/*.json; do
	name=$(basename "$spec" .json)
	mkdir -p "$cases/$name"
	"${TMPDIR:-/tmp}/ticdc-vectors" "$spec" >"$cases/$name/events.jsonl"
done
