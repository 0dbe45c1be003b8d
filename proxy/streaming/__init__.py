"""The streaming engine: the relay loop, deadlines, sinks, readiness and the drain of open streams."""
