"""The cpu wheel bundles tcmalloc under ``vllm/libs/`` (``scripts.series.bundled``,
pinned in the line's ``base.toml``), where the base's CPU platform looks for it
(``vllm/platforms/cpu.py``): an engine's worker runs with it preloaded, from
the ``vllm`` package it imports, and embeds as sentence-transformers does.

Measured (docs/performance.md, "tcmalloc"): all-MiniLM-L6-v2 over the 2,758
STS-B sentences, MRV2 side by side with and without it."""

from __future__ import annotations

import pytest

from scripts.validation.engine import bundled_tcmalloc, embed, mapped_tcmalloc, rowwise_cosine, vllm_runner
from scripts.validation.checkpoints.models import minilm_path, sts_test
from scripts.validation.references import st_embed

pytestmark = pytest.mark.e2e


def test_engine_worker_runs_with_the_bundled_tcmalloc(monkeypatch):
    # an engine opened earlier in this process left its LD_PRELOAD here: the platform must write it
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    sentences = sts_test().sentences[:64]
    with vllm_runner(minilm_path(), "v2") as llm:
        (maps,) = llm.collective_rpc(mapped_tcmalloc)
        got, _ = embed(llm, sentences)
    assert maps == [str(bundled_tcmalloc())]
    want = st_embed(minilm_path(), sentences)
    assert rowwise_cosine(got, want).min() > 0.99999
