"""The segment-log storage engine: Kafka's on-disk layout, no network, no threads of its own."""
