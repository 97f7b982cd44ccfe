"""Measure, on a real GPU, the step costs the load model assumes for an H100.

The load model (`actors/engines/batching.EngineCurve`, H100 defaults in
`benchmarks/h100_goodput.py`) prices a decode step at ``7.4 ms + 0.051 ms`` per sequence,
a prefill at 24,000 tokens/s, and gives a 7-8B model a 400,000-token KV cache.  Those
numbers were read off public vLLM figures, not measured here.  This script measures them
at the torch level on whatever CUDA device it runs on, for the decoder shapes of the
paper's 7-8B models, with random bf16 weights (no model can be downloaded on the device
machine, and the cost of a step does not depend on the weights' values):

* prefill: one causal forward pass over a batch of prompts, tokens/s;
* decode: one step (every layer, then the LM head) for ``b`` sequences that each hold
  ``t`` tokens of context, captured in a CUDA graph as vLLM does, so Python overhead is
  not counted; a least-squares line ``base + per_seq * b`` per context length;
* KV cache: bytes per token from the shape, and the tokens an 80 GB H100 holds at vLLM's
  default ``gpu_memory_utilization`` 0.9 after the weights.

What it is not: vLLM.  There is no paged attention, no FlashAttention kernel for the
decode (a batched matmul over a contiguous cache, which reads K and V once, as the paged
kernel does), no sampling and no scheduler.  Run it on the device machine:

    python -m benchmarks.gpu_step_costs            # CUDA device, both shapes
    python -m benchmarks.gpu_step_costs --tiny     # CPU smoke run of the code path
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

H100_BYTES = 80 * 1024**3
GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default
ASSUMED = {"decode_base_ms": 7.4, "decode_per_seq_ms": 0.051, "prefill_tokens_per_s": 24_000}


@dataclasses.dataclass(frozen=True)
class Shape:
    """A decoder's dimensions (the published configs of the named models)."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2  # K and V, bf16

    @property
    def params(self) -> int:
        attn = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim
        attn += self.heads * self.head_dim * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attn + mlp) + 2 * self.vocab * self.hidden


SHAPES = {
    "llama-3.1-8b": Shape("llama-3.1-8b", 4096, 14336, 32, 32, 8, 128_256),
    # Qwen2.5-7B: the family of the paper's policy and of GenPRM-7B.
    "qwen2.5-7b": Shape("qwen2.5-7b", 3584, 18944, 28, 28, 4, 152_064),
    "tiny": Shape("tiny", 256, 512, 2, 8, 2, 1000),
}


class Decoder:
    """A Llama-style decoder stack with random weights: RMSNorm, GQA attention, SwiGLU."""

    def __init__(self, shape: Shape, device: torch.device, dtype: torch.dtype) -> None:
        self.shape = shape

        def w(*dims: int) -> torch.Tensor:
            return torch.empty(*dims, device=device, dtype=dtype).normal_(0, 0.02)

        s = shape
        self.layers = [
            {
                "qkv": w((s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden),
                "o": w(s.hidden, s.heads * s.head_dim),
                "gate_up": w(2 * s.intermediate, s.hidden),
                "down": w(s.hidden, s.intermediate),
                "ln1": torch.ones(s.hidden, device=device, dtype=dtype),
                "ln2": torch.ones(s.hidden, device=device, dtype=dtype),
            }
            for _ in range(s.layers)
        ]
        self.embed = w(s.vocab, s.hidden)
        self.head = w(s.vocab, s.hidden)

    @staticmethod
    def _norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # by hand rather than F.rms_norm, which older torch builds lack
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    def _mlp(self, x: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        gate, up = (x @ layer["gate_up"].T).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ layer["down"].T

    def _split(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = self.shape
        q, k, v = torch.split(
            qkv, [s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1
        )
        return q, k, v

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Causal forward over [batch, length] tokens; logits of the last position."""
        s = self.shape
        batch, length = tokens.shape
        x = self.embed[tokens]
        for layer in self.layers:
            q, k, v = self._split(self._norm(x, layer["ln1"]) @ layer["qkv"].T)
            q = q.view(batch, length, s.heads, s.head_dim).transpose(1, 2)
            k = k.view(batch, length, s.kv_heads, s.head_dim).transpose(1, 2)
            v = v.view(batch, length, s.kv_heads, s.head_dim).transpose(1, 2)
            group = s.heads // s.kv_heads
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + attn.transpose(1, 2).reshape(batch, length, -1) @ layer["o"].T
            x = x + self._mlp(self._norm(x, layer["ln2"]), layer)
        return x[:, -1] @ self.head.T

    def prefill_after(
        self, tokens: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """Prefill [batch, length] new tokens after a cached context (a cache hit): each
        layer writes the new K and V into the tail of its preallocated cache [batch, kv,
        cached + length, d], as an engine writes into its blocks, and the new queries
        attend to the whole of it (causal within the new tokens).  Grouped-query
        attention through SDPA's `enable_gqa`, so K and V are not expanded per head."""
        s = self.shape
        batch, length = tokens.shape
        total = caches[0][0].shape[2]
        cached = total - length
        rows = torch.arange(length, device=tokens.device)[:, None]
        mask = torch.arange(total, device=tokens.device)[None, :] <= cached + rows
        x = self.embed[tokens]
        for layer, (k_cache, v_cache) in zip(self.layers, caches, strict=True):
            q, k, v = self._split(self._norm(x, layer["ln1"]) @ layer["qkv"].T)
            q = q.view(batch, length, s.heads, s.head_dim).transpose(1, 2)
            k_cache[:, :, cached:] = k.view(batch, length, s.kv_heads, s.head_dim).transpose(1, 2)
            v_cache[:, :, cached:] = v.view(batch, length, s.kv_heads, s.head_dim).transpose(1, 2)
            attn = F.scaled_dot_product_attention(
                q, k_cache, v_cache, attn_mask=mask, enable_gqa=True
            )
            x = x + attn.transpose(1, 2).reshape(batch, length, -1) @ layer["o"].T
            x = x + self._mlp(self._norm(x, layer["ln2"]), layer)
        return x[:, -1] @ self.head.T

    def decode_step(
        self, tokens: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """One decode step for [batch] tokens against per-layer caches [batch, kv, t, d].

        Attention groups the query heads by their KV head so each K and V block is read
        once (what a GQA kernel does) instead of being expanded per query head.
        """
        s = self.shape
        batch = tokens.shape[0]
        group = s.heads // s.kv_heads
        x = self.embed[tokens]
        for layer, (k_cache, v_cache) in zip(self.layers, caches, strict=True):
            q, _, _ = self._split(self._norm(x, layer["ln1"]) @ layer["qkv"].T)
            q = q.view(batch, s.kv_heads, group, s.head_dim)
            scores = torch.matmul(q, k_cache.transpose(-1, -2)) * s.head_dim**-0.5
            attn = torch.matmul(scores.softmax(dim=-1), v_cache)
            x = x + attn.reshape(batch, -1) @ layer["o"].T
            x = x + self._mlp(self._norm(x, layer["ln2"]), layer)
        return x @ self.head.T


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median seconds of `repeats` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def graphed(fn: Callable[[], object], device: torch.device) -> Callable[[], object]:
    """Capture `fn` in a CUDA graph (as vLLM runs decode) so launches cost nothing."""
    if device.type != "cuda":
        return fn
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``y = base + slope * x``."""
    xs = [float(x) for x, _ in points]
    ys = [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - slope * mx, slope


def _caches(
    shape: Shape, batch: int, tokens: int, device: torch.device, dtype: torch.dtype
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random K and V caches, one pair per layer, of `tokens` tokens per sequence."""
    dims = (batch, shape.kv_heads, tokens, shape.head_dim)
    return [
        (
            torch.randn(*dims, device=device, dtype=dtype),
            torch.randn(*dims, device=device, dtype=dtype),
        )
        for _ in range(shape.layers)
    ]


def measure(shape: Shape, args: argparse.Namespace, device: torch.device) -> dict[str, object]:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = Decoder(shape, device, dtype)
    out: dict[str, object] = {"shape": shape.name}
    with torch.inference_mode():
        prefill = {}
        for batch, length in args.prefill:
            tokens = torch.randint(0, shape.vocab, (batch, length), device=device)
            seconds = timed(functools.partial(model.prefill, tokens), device, args.repeats)
            prefill[(batch, length)] = batch * length / seconds
        out["prefill"] = prefill

        # New tokens after a cached context: what a cache hit still costs, and whether
        # it grows with the context (the load model prices only the uncached tokens).
        after = {}
        batch, length = args.prefill_after
        for cached in args.cached_contexts:
            caches = _caches(shape, batch, cached + length, device, dtype)
            tokens = torch.randint(0, shape.vocab, (batch, length), device=device)
            seconds = timed(
                functools.partial(model.prefill_after, tokens, caches), device, args.repeats
            )
            after[cached] = batch * length / seconds
            del caches
        out["prefill_after"] = after

        free = torch.cuda.mem_get_info()[0] if device.type == "cuda" else 1 << 40
        decode: dict[int, list[tuple[int, float]]] = {}
        for context in args.contexts:
            for batch in args.batches:
                kv_bytes = batch * context * shape.kv_bytes_per_token
                if kv_bytes > 0.8 * free:
                    continue  # does not fit beside the weights on this device
                caches = _caches(shape, batch, context, device, dtype)
                tokens = torch.randint(0, shape.vocab, (batch,), device=device)
                step = graphed(functools.partial(model.decode_step, tokens, caches), device)
                decode.setdefault(context, []).append((batch, timed(step, device, args.repeats)))
                del caches, step
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        out["decode"] = decode
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def report(result: dict[str, object], shape: Shape, device_bytes: int) -> list[str]:
    lines = [
        f"\n## {shape.name}: {shape.params / 1e9:.2f}B parameters, "
        f"{shape.kv_bytes_per_token / 1024:.0f} KiB KV per token"
    ]
    weights = shape.params * 2
    for label, total in (("H100 80 GB", H100_BYTES), ("this device", device_bytes)):
        kv_tokens = (GPU_MEMORY_UTILIZATION * total - weights) / shape.kv_bytes_per_token
        lines.append(
            f"KV cache at utilization 0.9 after {weights / 1e9:.1f} GB of weights, "
            f"{label}: {kv_tokens / 1000:.0f}k tokens (before activations)"
        )
    lines.append("\n| prefill batch x length | tokens/s |\n|---|---|")
    prefill = result["prefill"]
    assert isinstance(prefill, dict)
    for (batch, length), rate in prefill.items():
        lines.append(f"| {batch} x {length} | {rate:,.0f} |")
    after = result["prefill_after"]
    assert isinstance(after, dict)
    lines.append(
        "\n| cached context tokens | new tokens/s after it | vs no context |\n|---|---|---|"
    )
    for cached, rate in after.items():
        lines.append(f"| {cached} | {rate:,.0f} | {rate / after[min(after)]:.2f} |")
    decode = result["decode"]
    assert isinstance(decode, dict)
    batches = sorted({b for points in decode.values() for b, _ in points})
    lines.append(
        "\n| context tokens | decode step ms at batch "
        + " / ".join(map(str, batches))
        + " | fit base ms | fit ms per sequence | tokens/s at the largest batch that fit |"
    )
    lines.append("|---|---|---|---|---|")
    slopes = []
    for context, points in decode.items():
        base, slope = fit_line(points) if len(points) > 1 else (points[0][1], 0.0)
        slopes.append((context, slope))
        largest, seconds = points[-1]
        measured = dict(points)
        steps = " / ".join(
            f"{measured[b] * 1000:.1f}" if b in measured else "- (no room)" for b in batches
        )
        lines.append(
            f"| {context} | {steps} | {base * 1000:.1f} | {slope * 1000:.3f} "
            f"| {largest / seconds:,.0f} |"
        )
    if len(slopes) > 1:  # the per-sequence cost against context: the KV read per token
        at_zero, per_token = fit_line(slopes)
        lines.append(
            f"\nper sequence: {at_zero * 1000:.4f} ms + {per_token * 1e9:.1f} ns per context "
            f"token ({shape.kv_bytes_per_token / per_token / 1e12:.2f} TB/s of KV reads)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run with a tiny shape")
    parser.add_argument("--shapes", nargs="+", default=["llama-3.1-8b", "qwen2.5-7b"])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    if args.tiny:
        args.shapes, args.repeats = ["tiny"], 2
        args.prefill, args.contexts, args.batches = [(2, 64)], [32, 64], [1, 4, 8]
        args.prefill_after, args.cached_contexts = (2, 16), [0, 64]
    else:
        args.prefill = [(1, 512), (1, 3000), (4, 2048), (1, 8192)]
        args.prefill_after, args.cached_contexts = (8, 256), [0, 1024, 3072, 8192]
        args.contexts = [512, 2048, 4096]
        args.batches = [1, 16, 64, 128, 256]
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    device_bytes = torch.cuda.get_device_properties(0).total_memory if device.type == "cuda" else 0
    print(f"# torch {torch.__version__} on {name}; load-model H100 assumptions: {ASSUMED}")
    first_prefill: float | None = None  # the last line: the first shape's best prefill
    for shape_name in args.shapes:
        shape = SHAPES[shape_name]
        started = time.perf_counter()
        result = measure(shape, args, device)
        print("\n".join(report(result, shape, device_bytes)))
        print(f"({time.perf_counter() - started:.0f} s)", flush=True)
        prefill = result["prefill"]
        assert isinstance(prefill, dict)
        if first_prefill is None:
            first_prefill = max(prefill.values())
    print(f"prefill_tokens_per_s={first_prefill:.0f}")


if __name__ == "__main__":
    main()
