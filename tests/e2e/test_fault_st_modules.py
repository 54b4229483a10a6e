"""Issue 38 items 1 and 2 (patches 0059 to 0062), as a user meets them: models
saved by sentence-transformers 6.2 itself (``scripts.validation.checkpoints.st_saved``,
tiny random BERTs, fp32) served offline on MRV2 (vLLM's default, asserted)
and on V1 (``VLLM_USE_V2_MODEL_RUNNER=0``), and an XLM-R reranker saved by
transformers 5 through ``vllm serve``.

- A SparseEncoder saved with ``pooling_strategy: "sum"`` (and one with the
  ``log1p_relu`` activation) embeds as ``SparseEncoder.encode`` (before: max
  pooled, up to 3.8 off).
- A CrossEncoder saved with prompts and ``default_prompt_name`` scores as
  ``CrossEncoder.predict(pairs)`` (before: as ``predict(pairs, prompt="")``).
- A model with a ``Router`` is refused at start-up (before: served as its
  128-d normalised mean, the Router's Dense layers dropped).
- The reranker (130 positions, padding index 1, 128 usable) gets
  ``max_model_len`` 128; a 130-token pair is a 400 naming the limit, and the
  server scores the next pair as transformers does."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from scripts.validation.checkpoints import st_saved
from scripts.validation.engine import vllm_runner
from scripts.validation.server import VllmServer

pytestmark = pytest.mark.line("0.32.0", "0.34.0")

TOL = 1e-4
SPLADE = {"hf_overrides": {"architectures": ["BertSpladeSparseEmbeddingModel"]}}
QUERY = "what is the capital of france"
DOCS = ["paris is the capital and largest city of france", "the river flows north through the old town",
        "a man is playing a guitar"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("st-modules-e2e")
    return {
        "splade_sum": st_saved.save_sparse(root / "splade-sum", "sum"),
        "splade_log1p": st_saved.save_sparse(root / "splade-log1p", "max", "log1p_relu", mlm_transformer=False),
        "ce_prompt": st_saved.save_cross_encoder(root / "ce-prompt", "Identity",
                                                 prompts={"query": "query: ", "document": "passage: "},
                                                 default_prompt_name="query"),
        "router": st_saved.save_router(root / "router"),
    }


@pytest.mark.parametrize(("name", "runner"), [("splade_sum", "default"), ("splade_sum", "v1"),
                                              ("splade_log1p", "default")])
def test_splade_is_sparse_encoder_encode(models, in_process, name, runner):
    texts = [QUERY, *DOCS]
    expected = st_saved.sparse_encode(models[name], texts)
    with vllm_runner(models[name], runner, **SPLADE) as llm:
        got = np.asarray([o.outputs.embedding for o in llm.embed(texts, use_tqdm=False)], dtype=np.float32)
    assert got.shape == expected.shape == (len(texts), 30522)
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("runner", ["default", "v1"])
def test_cross_encoder_default_prompt_is_predict(models, in_process, runner):
    model = models["ce_prompt"]
    pairs = [(QUERY, d) for d in DOCS]
    expected = st_saved.ce_predict(model, pairs)
    # the prompt matters: without it the scores are others
    assert np.abs(expected - st_saved.ce_predict(model, pairs, prompt="")).max() > 1e-3
    with vllm_runner(model, runner) as llm:
        got = np.asarray([o.outputs.score for o in llm.score(QUERY, DOCS, use_tqdm=False)])
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("runner", ["default", "v1"])  # v1 deselected where the base has none (0.34.0)
def test_a_router_is_refused_on_each_runner(models, in_process, runner):
    with pytest.raises(ValueError, match=r"module Router \(2_Router of .*default route 'document'"):
        with vllm_runner(models["router"], runner):
            pass


def test_an_xlmr_reranker_past_its_position_table_is_a_400(tmp_path):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from tests.unit.test_position_table import XLMR_RERANKER, with_files

    model = with_files(XLMR_RERANKER(tmp_path / "xlmr", max_position_embeddings=130), tmp_path / "reranker", 128)
    tok = AutoTokenizer.from_pretrained(str(model))
    hf = AutoModelForSequenceClassification.from_pretrained(str(model)).eval()
    short, long_doc = "the cat sat on the mat", " ".join(["word"] * 200)
    with torch.no_grad():
        # one label: the score is the sigmoid of the logit, as CrossEncoder.predict gives it
        expected = torch.sigmoid(hf(**tok(QUERY, short, return_tensors="pt")).logits[0, 0]).item()
    ids = tok(QUERY, long_doc, truncation="only_second", max_length=130)["input_ids"]
    assert len(ids) == 130
    with VllmServer(model, name="xlmr-offset-table") as server:
        assert server.runner() == "MRV2"
        (card,) = requests.get(server.url("/v1/models"), timeout=30).json()["data"]
        assert card["max_model_len"] == 128
        r = requests.post(server.url("/score"), json={"model": card["id"], "queries": QUERY,
                                                      "documents": long_doc}, timeout=120)
        assert r.status_code == 400, r.text
        assert "128" in r.json()["error"]["message"]
        r = requests.post(server.url("/score"), json={"model": card["id"], "queries": QUERY,
                                                      "documents": short}, timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["data"][0]["score"] == pytest.approx(expected, abs=TOL)
