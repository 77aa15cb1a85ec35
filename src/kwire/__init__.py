"""kwire: Kafka's wire protocol in Python."""

__version__ = "0.1.0"
