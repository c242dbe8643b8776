"""Pieces every kafkasim layer shares: the error tree, the clock port, config declarations,
the Rpc and Coordination ports, and Kafka's big-endian wire primitives (``wire_format``)."""
