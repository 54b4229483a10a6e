"""The validation matrix in ``make test``, generated from the matrix's own
row definitions: one case per family (``scripts/validation/matrix/rows.py``,
cases with ``smoke=True``), each on the runner vLLM picks by default
(asserted) and on V1 (a maintenance line's share of ``make test``: the
default runner only), against transformers on the same weights; and every
real-weight and MTEB STS row (``scripts/validation/matrix/real.py``):
all-MiniLM-L6-v2's embed (all STS-B test sentences, min cosine with
sentence-transformers) and token_embed (against transformers), and STS-B
test through mteb (sentence-transformers against the engine), on MRV2 (vLLM's
default, asserted) and V1. ``make matrix`` and the Buildkite pipeline run
every case."""

from __future__ import annotations

import pytest

from scripts.validation.matrix.real import ROW_IDS
from scripts.validation.matrix.rows import CASES
from scripts.validation.matrix.runner import run_case, run_row

FAMILY_CASES = [c for c in CASES if c.smoke]


@pytest.mark.parametrize("case", FAMILY_CASES, ids=[f"{c.family}:{c.id}" for c in FAMILY_CASES])
def test_family_case_matches_transformers_on_its_runners(case, monkeypatch, request):
    """On the runner vLLM picks by default and on V1 (``--family-default-runner-only``:
    the default runner alone, as a maintenance line's share of ``make test`` runs it)."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one process: start-up in seconds
    only_default = request.config.getoption("--family-default-runner-only")
    runners = (case.default_runner,) if only_default else case.runners
    rows = run_case(case, runners)
    assert [(r.task, r.runner) for r in rows] == [(t.name, runner) for runner in runners for t in case.tasks]
    assert [(r.id, r.reason) for r in rows if not r.passed] == []
    assert all(r.ran == r.runner and r.value <= r.tolerance for r in rows)


@pytest.mark.parametrize("row_id", ROW_IDS)
def test_real_weight_row(row_id, monkeypatch):
    if not row_id.startswith("mteb-sts/"):  # mteb's wrapper opens its engine as users get it
        monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    row = run_row(row_id)
    assert row.passed, row.reason
    assert row.ran == row.runner == row_id.split("/")[1]
    if row.metric == "min cosine":
        assert row.value >= row.tolerance == 0.99999
    else:
        assert 0 <= row.value <= row.tolerance == 1e-4
