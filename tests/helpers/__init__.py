"""Helpers several test modules share (never a test module imported by another)."""
