"""kafkasim client package."""
