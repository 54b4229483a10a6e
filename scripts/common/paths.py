"""The repository's directories, defined once (standard library only: the
Makefile runs ``scripts.series.base`` with the system Python)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Job reports (Markdown, JSON, JUnit) and the logs of quiet jobs.
REPORTS = REPO / "reports"
# Build state: checkpoints made at run time, logs of wheel builds, scratch trees.
BUILD = REPO / ".build"
