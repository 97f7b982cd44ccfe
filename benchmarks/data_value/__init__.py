"""What the data is worth: `python -m benchmarks.data_value [--quick]`.

Two halves, because they need different virtualenvs:

* `measure` (the project's venv: Ray, llama.cpp, math-verify) synthesizes the train
  problems with each method, hands the rows to the training half, grades the answers
  and prints the table; `python -m benchmarks.data_value` runs it;
* `train` (the TRL venv, ``.venv-trl``: torch, transformers, TRL; no Ray) fine-tunes on
  each method's rows and answers the held-out problems.

This file imports neither, so the TRL venv can import `benchmarks.data_value.train`
without the project's dependencies.
"""
