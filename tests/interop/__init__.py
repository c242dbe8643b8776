"""Tests with real Kafka clients."""
