"""`bgmcts train-prm`: a real run's prm rows -> a checkpoint the engines load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import cli
from pipeline.store.run_folder import RunFolder

pytestmark = pytest.mark.integration

pytest.importorskip("transformers")


def _splits(run: Path) -> dict[str, set[str]]:
    rows = RunFolder.at(run).read("prm").select(["problem_id", "split"]).to_pylist()
    found: dict[str, set[str]] = {"train": set(), "test": set()}
    for row in rows:
        found[row["split"]].add(row["problem_id"])
    return found


def test_trains_two_steps_and_the_checkpoint_loads(
    prm_run: Path, tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from actors.engines.step_layout import layout, separator_id

    splits = _splits(prm_run)
    assert splits["test"] and splits["train"]
    held_out = sorted(splits["train"])[0]
    exclude = tmp_path / "held_out.txt"
    exclude.write_text(f"{held_out}\n\n")
    out = tmp_path / "prm"
    argv = ["train-prm", str(prm_run), "--base", str(tiny_base), "--output", str(out)]
    argv += ["--max-steps", "2", "--batch-size", "4", "--exclude-problems", str(exclude)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    tables = RunFolder.at(prm_run).read("prm").to_pylist()
    test_rows = sum(row["split"] == "test" for row in tables)
    assert f"test-split rows left out: {test_rows}" in printed
    assert "step 2/2  loss" in printed

    meta = json.loads((out / "bgmcts_prm.json").read_text())
    assert meta["step_separator"] == "\n" and meta["prompt_format"] == "plain"
    assert meta["steps"] == "lines" and meta["train_steps"] == 2
    assert meta["base"] == str(tiny_base) and meta["runs"] == [str(prm_run)]
    # the test split and the excluded problem never reach training; the rest all do
    assert set(meta["problems"]) == splits["train"] - {held_out}
    assert not set(meta["problems"]) & splits["test"]
    excluded_rows = sum(row["problem_id"] == held_out for row in tables)
    assert meta["rows"]["dropped"]["test_split"] == test_rows
    assert meta["rows"]["dropped"]["excluded"] == excluded_rows
    assert meta["rows"]["used"] == len(tables) - test_rows - excluded_rows
    assert meta["final_loss"] > 0 and meta["versions"]["transformers"]
    good, bad = meta["steps_labelled"]["good"], meta["steps_labelled"]["bad"]
    assert good > 0 and bad > 0

    # the folder is what the transformers_prm engine loads: model, tokenizer, one layout
    model = AutoModelForTokenClassification.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.num_labels == 2 and model.config.id2label[1] == "good"

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    sep = separator_id(tokenize, meta["step_separator"])
    laid = layout(
        tokenize, "What is 2+2?", ["2+2 = 4.", "The answer is 4."], sep, meta["bos_token_id"]
    )
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([laid.input_ids])).logits
    assert logits.shape == (1, len(laid.input_ids), 2)
    # the trained weights, not the base's, were saved
    base = AutoModelForTokenClassification.from_pretrained(tiny_base)
    assert not torch.equal(base.score.weight, model.score.weight)


def test_soft_labels_and_a_row_cap(
    prm_run: Path, tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "prm"
    argv = ["train-prm", str(prm_run), str(prm_run), "--base", str(tiny_base)]
    argv += ["--output", str(out), "--max-steps", "1", "--labels", "soft", "--max-rows", "5"]
    argv += ["--class-weight", "balanced"]
    assert cli.main(argv) == 0
    meta = json.loads((out / "bgmcts_prm.json").read_text())
    total = RunFolder.at(prm_run).count("prm")
    # the second reading of the same run is all duplicates (its test rows dropped first)
    dropped = meta["rows"]["dropped"]
    assert meta["rows"]["read"] == 2 * total and meta["rows"]["used"] == 5
    assert dropped["duplicate"] + dropped["test_split"] // 2 == total
    assert dropped["max_rows"] == total - dropped["test_split"] // 2 - 5
    assert meta["labels"] == "soft" and set(meta["class_weights"]) == {"bad", "good"}
    # a full output folder is refused, and replaced with --overwrite
    capsys.readouterr()
    assert cli.main(argv) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert cli.main([*argv, "--overwrite"]) == 0


def test_bad_input_is_one_line_and_exit_2(
    prm_run: Path, tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty_run = tmp_path / "run=empty"
    (empty_run / "prm").mkdir(parents=True)
    everything = tmp_path / "all.txt"
    everything.write_text("\n".join(sorted(_splits(prm_run)["train"])) + "\n")
    base = ["--base", str(tiny_base), "--max-steps", "1"]
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    fresh = ["--output", str(tmp_path / "a")]
    cases = {
        "run=nope is not a run folder": [str(tmp_path / "run=nope"), *fresh],
        # the folder's own name (pytest numbers it after any other test of the same name)
        f"{tmp_path.name} is not a run folder": [str(tmp_path), *fresh],
        "has no prm rows": [str(empty_run), *fresh],
        "no prm row left": [str(prm_run), "--exclude-problems", str(everything), *fresh],
        "--exclude-problems": [str(prm_run), "--exclude-problems", str(tmp_path / "x"), *fresh],
        "must be exactly one": [str(prm_run), "--separator", " Step:", *fresh],
        "is not empty": [str(prm_run), "--output", str(full)],
    }
    for expected, argv in cases.items():
        assert cli.main(["train-prm", *argv, *base]) == 2, expected
        err = capsys.readouterr().err
        assert err.startswith("error: ") and expected in err, (expected, err)
        assert "Traceback" not in err and err.count("\n") == 1, err
    assert not (tmp_path / "a").exists()
    assert (full / "keep.txt").read_text() == "x"
