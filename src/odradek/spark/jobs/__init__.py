"""Kafka Streams' example applications as Spark Structured Streaming jobs over Odradek."""
