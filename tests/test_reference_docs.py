"""The generated reference docs: every config field described, the docs fresh, prose kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import reference_docs
from jobs.reference_docs import BEGIN, END, Doc, MarkerError, splice


def test_every_config_field_has_a_description() -> None:
    sections = reference_docs.collect_sections()
    reached = {s.model.__name__ for s in sections}
    assert {"RunConfig", "EvalConfig", "BGMCTSConfig", "LlamaCppConfig", "HFSource"} <= reached
    missing = reference_docs.undocumented_fields(sections)
    assert not missing, "config fields without a description:\n  " + "\n  ".join(missing)


def test_checked_in_docs_are_fresh() -> None:
    stale = reference_docs.stale()
    names = ", ".join(str(p.relative_to(reference_docs.REPO_ROOT)) for p in stale)
    assert not stale, f"stale generated docs: {names}; run `make docs`"


def test_check_exits_1_naming_the_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = Doc("docs/x.md", "X", lambda: "generated")
    monkeypatch.setattr(reference_docs, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(reference_docs, "DOCS", (doc,))
    assert reference_docs.main(["--check"]) == 1
    assert "docs/x.md" in capsys.readouterr().err
    assert reference_docs.main([]) == 0
    assert reference_docs.main(["--check"]) == 0


def test_only_the_marked_block_is_rewritten(tmp_path: Path) -> None:
    before = "# Title\n\nHand-written intro, kept.\r\n\n"
    after = "\nHand-written notes after the block.\n| a | table |\n"
    path = tmp_path / "docs" / "ref.md"
    path.parent.mkdir()
    path.write_text(f"{before}{BEGIN}\nold generated text\n{END}\n{after}", encoding="utf-8")
    docs = [Doc("docs/ref.md", "Ref", lambda: "new generated text")]

    assert reference_docs.stale(tmp_path, docs) == [path]
    assert reference_docs.write(tmp_path, docs) == [path]
    text = path.read_bytes().decode("utf-8")
    assert text == f"{before}{BEGIN}\n\nnew generated text\n\n{END}\n{after}"
    assert reference_docs.stale(tmp_path, docs) == []
    assert reference_docs.write(tmp_path, docs) == []  # fresh: not rewritten


def test_a_file_without_markers_gets_the_block_appended() -> None:
    prose = "# Mine\n\nNo markers yet."
    assert splice(prose, "T", "gen") == f"{prose}\n\n{BEGIN}\n\ngen\n\n{END}\n"
    assert splice(None, "T", "gen") == f"# T\n\n{BEGIN}\n\ngen\n\n{END}\n"


def test_broken_markers_are_an_error() -> None:
    with pytest.raises(MarkerError):
        splice(f"{END}\n{BEGIN}\n", "T", "gen")
    with pytest.raises(MarkerError):
        splice(f"{BEGIN}\nno end\n", "T", "gen")
