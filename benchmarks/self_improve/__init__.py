"""One round of the self-improvement loop: `python -m benchmarks.self_improve [--quick]`.

Does BG-MCTS's data beat repeated sampling's once the policy and the PRM have been
trained on the pipeline's own round-0 trees, on problems that need several steps, at
the same total tokens (policy + PRM) per problem?

1. **Round 0** (`runs.round0_config`): the embedded default as `make synth` runs it
   (base SmolLM2-135M, few-shot prompt, GenPRM, BG-MCTS, B = 300 output tokens) on
   one-step problems.  Its ``sft`` rows fine-tune SmolLM2 (TRL's SFTTrainer in the TRL
   venv, `benchmarks.support.trl`) into the round-0 checkpoint; its trees' ``prm``
   rows train a one-pass PRM (``python -m jobs.train_prm``).
2. **Choosing the problems** (`plan`): the base model and the round-0 checkpoint draw k
   answers to probe problems of 2 and 3 operations; round 1 trains on the fewest
   operations where the round-0 checkpoint's pass@1 lies in [0.1, 0.5].
3. **Round 1** (`runs.round1_config`): the round-0 checkpoint, exported to GGUF
   (``python -m jobs.export_gguf``) and served by the llama.cpp engine with the bare
   problem as its prompt (as it was trained), searches the round-1 problems with BG-MCTS
   and with repeated sampling, scored by the trained one-pass PRM, each under the same
   budget of policy output + PRM input + PRM output tokens per problem
   (``search.cost``), once per synthesis seed.  Both write their rows through the
   process gate (``records.gates.false_equation`` and ``min_step_value``); the same trees
   are also rebuilt without it (`runs.rebuilt`) to show what it is worth.
4. **Train and evaluate**: a round-1 checkpoint per run (from the round-0 checkpoint,
   the same SFT steps for all) and per BG-MCTS run without the gate; base, round 0 and
   every round-1 checkpoint answer the held-out multi-step problems greedily, graded
   with math-verify; Wilson intervals, exact McNemar tests on the same problems, and
   means over seeds with Student-t intervals.

Modules: `plan` (sizes, selections, training settings), `runs` (pipeline runs),
`report`, `main`; running configs and commands, the TRL venv, grading and the statistics
are the benchmarks' shared harness, `benchmarks.support`.  Every stage is resumable under
``--work-dir``.
"""
