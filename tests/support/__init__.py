"""Helpers shared by several test modules (test modules do not import each other)."""
