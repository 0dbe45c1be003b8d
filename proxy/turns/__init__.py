"""One plan per kind of Response: forward, reverse, relayed, n choices, compaction; hosted tools."""
