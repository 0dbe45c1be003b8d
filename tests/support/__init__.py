"""Test support: strict stream validators and re-chunking helpers (no production code)."""
