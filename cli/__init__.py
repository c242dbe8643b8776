"""The ``kafkasim`` command line."""
