"""HTTP server: metrics, status API, dashboard."""
