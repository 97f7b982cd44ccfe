"""Helpers the benchmarks share; not benchmarks themselves.

The harness of the benchmarks that run the pipeline, train and grade:

* `synthesis`: a shipped run config edited on its typed model, and the real
  ``python -m jobs.synthesize`` run of it;
* `commands`: the one runner of a child command, its output in a log file;
* `trl`: a training and generation stage in the TRL venv;
* `grading`: completions graded against references as the search grades;
* `stats`: intervals, paired tests, pass@k and means over seeds.

Measuring:

* `procstat`: CPU ticks of a process tree and of the whole machine, from /proc;
* `cpu_by_process`: run a command and print the CPU seconds of its process tree by kind
  (policy and scorer replicas, search actor, the rest):
  `python -m benchmarks.support.cpu_by_process make synth`.
"""
