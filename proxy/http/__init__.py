"""The HTTP edge: the server, the WebSocket connection, stored-response routes, the model catalog."""
