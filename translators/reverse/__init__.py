"""A Chat Completions client on a Responses backend: request, stream machine, body, stop sequences."""
