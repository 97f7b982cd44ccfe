"""The model services and the parts of a search that talk to them.

* `serve` - the policy and scorer Ray Serve deployments, and the clients (`ServePolicy`,
  `ServeScorer`: timeouts, retries) every search actor shares them through;
* `engines` - the inference engines behind them: vLLM, llama.cpp, any OpenAI-compatible
  server, and model-free engines for load tests;
* `config` - the services' typed configs: engine, resources, resilience;
* `policy`, `genprm`, `rollout` - `search.Policy` and the two `search.Scorer`s (GenPRM,
  reference-answer rollouts) on any engine; `prompts` - their prompts;
* `coalesce`, `affinity`, `routing` - many trees' requests leave in one call, each tree's
  requests go to the same replica, buckets spread evenly over replicas;
* `admission` - how many trees to keep in flight per engine;
* `progress` - live counters the search actors push while trees run;
* `replay` - answering a retried tree's requests from its request log;
* `search_outcome` - whether a search produced anything, and the dead-engine breaker;
* `models` - where the embedded default model lives.

The search actor itself is `pipeline.run.search_actor`: it builds records and reads the
run config, and the layers import one way (jobs -> pipeline -> actors -> common -> search);
grading and redaction are in `common`, which the pipeline uses too.
"""
