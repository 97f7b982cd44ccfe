"""One synthesis run: the problem stream, the search actor, cluster start, progress, nightly."""
