"""Serving: compiled and exported decoding, int8."""
