"""NATS JetStream: connection, stream and consumer provisioning, embedded server."""
