"""Small utilities that both the model services (`actors/`) and the pipeline (`pipeline/`) use.

* `redact` - secrets removed from text, log lines and config dumps;
* `grading` - answer comparison that always ends within its time limit;
* `folders` - a folder a command writes in, made or refused in words naming the path.

What belongs here: a module with no Ray and no import of `actors/`, `pipeline/` or `jobs/`
(it sits below them in the layers, `tests/test_layers.py`), that more than one of those
layers needs.  A module that talks to a model, reads the run config or writes records
belongs in the layer that does that.
"""
