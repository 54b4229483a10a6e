"""embed through the engine: MiniLM on the V1 runner vs sentence-transformers,
a tiny Qwen3 decoder on MRV2 (Triton interpreter) vs transformers."""

from __future__ import annotations

import pytest

from scripts.engine import (close_llm, embed, hf_last_token_embed, open_llm, rowwise_cosine,
                            runner_in_use, st_embed, sts_spearman)
from scripts.models import make_tiny_qwen3, minilm_path

MIN_COSINE = 0.99999  # DESIGN.md: embed, all-MiniLM-L6-v2, fp32
TOLERANCE = 1e-4  # DESIGN.md: last-token embed, tiny decoder, fp32
STS_SPEARMAN_ST = 0.8204  # sentence-transformers on STS-B test (DESIGN.md)


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    return make_tiny_qwen3(tmp_path_factory.mktemp("models") / "tiny-qwen3")


def test_minilm_embed_v1_matches_sentence_transformers(sts):
    sentences = sts.sentences
    llm = open_llm(minilm_path(), runner="v1")
    try:
        assert runner_in_use(llm) == "V1"
        got, _ = embed(llm, sentences)
    finally:
        close_llm(llm)
    ref = st_embed(minilm_path(), sentences)
    assert got.shape == ref.shape == (len(sentences), 384)
    assert rowwise_cosine(got, ref).min() >= MIN_COSINE
    n = len(sts.first)
    ours, theirs = sts_spearman(got[:n], got[n:], sts.gold), sts_spearman(ref[:n], ref[n:], sts.gold)
    assert abs(theirs - STS_SPEARMAN_ST) < 5e-5
    assert abs(ours - theirs) <= 1e-4


def test_decoder_last_token_embed_on_mrv2(sts, tiny_qwen3):
    sentences = sts.sentences[:512]
    llm = open_llm(tiny_qwen3, runner="v2")
    try:
        assert runner_in_use(llm) == "MRV2"
        assert llm.llm_engine.vllm_config.use_v2_model_runner
        got, _ = embed(llm, sentences)
    finally:
        close_llm(llm)
    ref = hf_last_token_embed(tiny_qwen3, sentences)
    assert got.shape == ref.shape == (len(sentences), 128)
    assert abs(got - ref).max() <= TOLERANCE
