"""tidelake: change data capture into an Apache Hudi lakehouse, exactly once, within seconds."""

__version__ = "0.1.0"
