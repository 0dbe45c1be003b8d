"""Responses on both sides: the Response object, Responses streams relayed, normalised and replayed."""
