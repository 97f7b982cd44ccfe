"""Entrypoints for `ray job submit` and the local CLI.

One module per command (`python -m jobs.<name>`): `synthesize`, `publish`, `nightly`,
`evaluate`; `cli` is the `bgmcts` command over them, `exits` their exit statuses and
one-line errors, and `reference_docs` writes the docs generated from the code.
"""
