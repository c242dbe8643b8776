"""kafkasim controller package."""
