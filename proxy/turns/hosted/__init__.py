"""Tools crossfeed runs inside a Response: the tool loop, web search and its backends, remote MCP."""
