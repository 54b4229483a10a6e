"""The repository's directories, defined once (standard library only: the
Makefile runs ``scripts.series.base`` with the system Python)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Job reports (Markdown, JSON, JUnit) and the logs of quiet jobs.
REPORTS = REPO / "reports"
# Build state: checkpoints made at run time, logs of wheel builds, scratch trees.
BUILD = REPO / ".build"


def child_pythonpath() -> str:
    """``PYTHONPATH`` for a child process that must import the ``vllm`` this
    process would import (the line tree a job or test runs on, or the
    working tree ``vllm/``) and this repository's packages: the directory
    holding that ``vllm``, then the repository."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("vllm")
    roots = [str(Path(spec.origin).parents[1])] if spec and spec.origin else []
    return os.pathsep.join(dict.fromkeys([*roots, str(REPO)]))
