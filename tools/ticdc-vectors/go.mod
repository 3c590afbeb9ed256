module github.com/tidelake/tidelake/tools/ticdc-vectors

go 1.25.0

require (
	github.com/goccy/go-json v0.10.5
	github.com/mailru/easyjson v0.7.7
	github.com/pingcap/tidb/pkg/parser v0.0.0-20260418072757-ce92298d1124
	golang.org/x/text v0.37.0
)

require (
	github.com/coreos/go-semver v0.3.1 // indirect
	github.com/pingcap/errors v0.11.5-0.20250523034308-74f78ae071ee // indirect
	github.com/pingcap/failpoint v0.0.0-20240528011301-b51a646c7c86 // indirect
	github.com/pingcap/log v1.1.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.0 // indirect
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
)
