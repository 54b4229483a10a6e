"""The validation matrix in ``make test``: one case per family, generated
from the matrix's own row definitions (``scripts/validation/matrix_rows.py``, cases
with ``smoke=True``), each on the runner vLLM picks by default (asserted)
and on V1, against transformers on the same weights; and the MTEB STS rows
(STS-B test through mteb, sentence-transformers against the engine).
``make matrix`` and the Buildkite pipeline run every case."""

from __future__ import annotations

import pytest

from scripts.validation.matrix import ROW_IDS, run_case, run_row
from scripts.validation.matrix_rows import CASES

FAMILY_CASES = [c for c in CASES if c.smoke]
MTEB_ROWS = [r for r in ROW_IDS if r.startswith("mteb-sts/")]


@pytest.mark.parametrize("case", FAMILY_CASES, ids=[f"{c.family}:{c.id}" for c in FAMILY_CASES])
def test_family_case_matches_transformers_on_its_runners(case, monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one process: start-up in seconds
    rows = run_case(case)
    assert [(r.task, r.runner) for r in rows] == [(t.name, runner) for runner in case.runners for t in case.tasks]
    assert [(r.id, r.reason) for r in rows if not r.passed] == []
    assert all(r.ran == r.runner and r.value <= r.tolerance for r in rows)


@pytest.mark.parametrize("row_id", MTEB_ROWS)
def test_mteb_sts_row(row_id):
    row = run_row(row_id)
    assert row.passed, row.reason
    assert row.value is not None and 0 <= row.value <= 1e-4
