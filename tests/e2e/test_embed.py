"""embed through the engine on the V1 runner: MiniLM vs sentence-transformers
on all STS-B test sentences. (The MRV2 rows are in test_pooling_mrv2.py.)"""

from __future__ import annotations

from scripts.validation.engine import close_llm, embed, open_llm, rowwise_cosine, runner_in_use, st_embed, sts_spearman
from scripts.validation.models import minilm_path

MIN_COSINE = 0.99999  # DESIGN.md: embed, all-MiniLM-L6-v2, fp32
STS_SPEARMAN_ST = 0.8204  # sentence-transformers on STS-B test (DESIGN.md)


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
