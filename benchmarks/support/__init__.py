"""Helpers the benchmarks share; not benchmarks themselves.

What each module does is in each module's docstring, and in one table in
benchmarks/README.md ("Helpers").
"""
