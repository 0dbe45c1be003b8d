"""A Responses client on a Chat Completions backend: request, input, tools, the stream machine, bodies."""
