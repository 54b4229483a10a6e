"""The series keeps its base's formatting (``scripts.series.formatting``):
``lint_formatting`` names every file a patch leaves unformatted where the
base's version is formatted, and every unformatted file a patch adds; it
leaves files the base itself does not format as it found them."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from scripts.series.formatting import lint_formatting
from tests.conftest import FAKE_FILES


def write_patch(patches_dir: Path, name: str, path: str, before: str | None, after: str) -> None:
    """Append patch ``name`` to the series: ``path`` changed from ``before``
    (``None``: a new file) to ``after``."""
    diff = "".join(difflib.unified_diff(
        (before or "").splitlines(keepends=True), after.splitlines(keepends=True),
        f"a/{path}" if before is not None else "/dev/null", f"b/{path}"))
    header = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if before is None else "")
    (patches_dir / name).write_text(
        f"Description: {name}\nAuthor: t <t@t>\nOrigin: vendor\nForwarded: no\nLast-Update: 2026-12-02\n"
        f"---\n{header}{diff}")
    with (patches_dir / "series").open("a") as f:
        f.write(name + "\n")


def test_unformatted_change_to_a_formatted_base_file_is_named(fake_base, patches_dir):
    base, _ = fake_base
    config = FAKE_FILES["vllm/config.py"]
    write_patch(patches_dir, "0001-ok.patch", "vllm/config.py", config, config + "EXTRA = [1, 2]\n")
    assert lint_formatting(base, patches_dir) == []
    write_patch(patches_dir, "0002-bad.patch", "vllm/config.py", config + "EXTRA = [1, 2]\n",
                config + "EXTRA = [1, 2]\nWORSE = [1,\n  2]\n")
    (problem,) = lint_formatting(base, patches_dir)
    assert problem.startswith("vllm/config.py: `ruff format --isolated --line-length 88` would reformat it")
    assert "(the base passes; changed by 0001-ok.patch, 0002-bad.patch)" in problem


def test_file_the_base_leaves_unformatted_is_not_held_to_it(fake_base, patches_dir):
    base, _ = fake_base  # vllm/runner.py: one blank line between functions, which ruff format makes two
    runner = FAKE_FILES["vllm/runner.py"]
    write_patch(patches_dir, "0001-runner.patch", "vllm/runner.py", runner,
                runner + "def extra():\n    return [1,\n  2]\n")
    assert lint_formatting(base, patches_dir) == []


def test_unformatted_new_file_is_named(fake_base, patches_dir):
    base, _ = fake_base
    write_patch(patches_dir, "0001-new.patch", "vllm/new_module.py", None, "X = (1,\n 2)\n")
    (problem,) = lint_formatting(base, patches_dir)
    assert problem.startswith("vllm/new_module.py: ")
    assert "(added by 0001-new.patch)" in problem


def test_ruff_that_does_not_run_is_an_error(fake_base, patches_dir, monkeypatch):
    """Exit 1 with no file named is ruff failing to start, not a clean series."""
    import subprocess

    from scripts.series import formatting

    config = FAKE_FILES["vllm/config.py"]
    write_patch(patches_dir, "0001-ok.patch", "vllm/config.py", config, config + "EXTRA = [1, 2]\n")
    base, _ = fake_base
    gone = subprocess.CompletedProcess([], 1, stdout="", stderr="No module named ruff")
    real_run = subprocess.run

    def run(cmd, *args, **kwargs):  # ruff only; git runs as it does
        return gone if "ruff" in cmd else real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(formatting.subprocess, "run", run)
    with pytest.raises(RuntimeError, match=r"ruff format --check did not run \(exit 1\): No module named ruff"):
        lint_formatting(base, patches_dir)
