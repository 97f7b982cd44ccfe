"""Helpers the benchmarks share; not benchmarks themselves.

* `procstat`: CPU ticks of a process tree and of the whole machine, from /proc;
* `cpu_by_process`: run a command and print the CPU seconds of its process tree by kind
  (policy and scorer replicas, search actor, the rest):
  `python -m benchmarks.support.cpu_by_process make synth`.
"""
