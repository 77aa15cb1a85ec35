"""Kafka's wire protocol, sans-IO: message codec, headers, framing, records, errors."""
