"""Change capture from source databases (MySQL/MariaDB binlog, PostgreSQL pgoutput)."""
