"""What outlives a request: stored responses and history, sealed reasoning, the store backends."""
