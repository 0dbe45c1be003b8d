"""The command line: serve (and its worker processes), check-config, demo, translate."""
