"""Contracts every stage may import: heartbeats, the storage interface, child processes."""
