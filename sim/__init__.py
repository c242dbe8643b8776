"""kafkasim sim package."""
