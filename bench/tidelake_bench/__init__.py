"""``tidelake bench``: every speed claim measured side by side, in one run, on one machine.

Absolute times drift from run to run (and on a shared machine from minute to minute), so each
measurement runs its contenders back to back on the same data: the stager against the
``nats bench`` transport ceiling on the same server and stream, the ingest against Hudi's own
writers and a plain Parquet append of the same records. ``docs/benchmarks.md`` holds the
method and the runs.
"""
