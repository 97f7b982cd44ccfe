"""`python -m benchmarks.scorer_value [--quick]`: what a one-pass PRM buys against GenPRM.

* `auc.py`: step AUC (Mann-Whitney, ties half) with DeLong's 95% interval, and the
  learning-curve helper (training rows -> AUC);
* `grid.py`: data yield of BG-MCTS and repeated sampling on the simulated grid under
  GenPRM's and the one-pass cost model (`SimParams.prm_cost`);
* `gpu_hour.py`: training rows per simulated GPU-hour at the H100 shape with GenPRM and
  with a one-pass PRM (`actors/engines/load_model_prm.py`) beside the policy on one GPU;
* `real.py`: the real-run parts (SmolLM2 runs, PRM training, AUC on held-out trees).
"""
