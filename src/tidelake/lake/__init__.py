"""Lake writer: PySpark + Apache Hudi ingest with the checkpoint inside each commit."""
