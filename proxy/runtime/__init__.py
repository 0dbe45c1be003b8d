"""What every room leans on: the configuration, logs, metrics, ids, admission and turn traces."""
