"""Pieces every kafkasim layer shares: the error tree, the clock port, config declarations."""
