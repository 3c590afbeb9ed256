"""Materialized views over the lake: each a Hudi table of its own, updated from the base
table's changes after each ingest round, with its checkpoint in its own commits
(docs/views.md)."""
