"""kafkasim node package."""
