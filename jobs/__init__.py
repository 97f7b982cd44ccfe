"""Entrypoints for `ray job submit` and the local CLI."""
