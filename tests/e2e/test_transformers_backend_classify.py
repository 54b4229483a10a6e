"""Patch 0015: a decoder classifier checkpoint (Qwen3ForSequenceClassification,
head saved as ``score.*``) served by the Transformers modeling backend
(``model_impl="transformers"``) starts and matches transformers, on MRV2 (by
default) and on V1; before, the engine failed at start-up ("There is no
module or parameter named 'score'"). The matrix's own case, run in-process."""

from __future__ import annotations

from scripts.matrix import run_case
from scripts.matrix_rows import case


def test_transformers_backend_loads_a_score_head(monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    rows = run_case(case("transformers-cls"))
    assert [(r.runner, r.ran, r.passed, r.reason) for r in rows] == [
        ("MRV2", "MRV2", True, None), ("V1", "V1", True, None)]
    assert all(r.value <= 1e-4 for r in rows)
