"""Issue 28 item 2 (patch 0045): models saved by sentence-transformers 6.2
are served as ``SentenceTransformer.encode`` / ``CrossEncoder.predict``
compute them, on the same saved files (``scripts.validation.st_saved``:
tiny random BERTs, fp32), within 1e-4.

Offline on MRV2 (vLLM's default, asserted) and, for one model, on V1
(``VLLM_USE_V2_MODEL_RUNNER=0``): the settings are read by the engine's
config, whichever runner runs. Through ``vllm serve``: ``/v1/embeddings``
and ``/score`` of the Dense model (not normalised, scored by dot
product). Before 0045: Pooling(mean) + Normalize
came back as normalised CLS, the Dense layer was missing (128 values
instead of 64), lasttoken pooling was CLS and normalised, the maximum length
was 512 instead of 128 (so a long text kept 512 tokens where
sentence-transformers keeps 128), a dot-product model was scored by cosine,
and a CrossEncoder saved with ``activation_fn=Identity()`` was scored with
sigmoid (three labels: tests/unit/test_sentence_transformers_settings.py).
The pooling modes ``max``, ``mean_sqrt_len_tokens`` and ``weightedmean``
(before: refused at start-up by 0045, served as CLS by 0.26.0) on MRV2 and
V1 alike."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from scripts.validation import st_saved
from scripts.validation.engine import vllm_runner
from scripts.validation.server import VllmServer

TOL = 1e-4
MAX_LEN = 128
QUERY = "what is the capital of france"
DOCS = ["paris is the capital and largest city of france", "the river flows north through the old town",
        "a man is playing a guitar"]


@pytest.fixture(scope="module")
def texts(sts):
    """Six STS-B sentences and one text of about 400 tokens (over the 128 the
    models were saved with)."""
    return sts.sentences[:6] + [" ".join(sts.sentences[:40])]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("st-e2e")
    return {
        "mean_normalize": st_saved.save_st(root / "mean", "mean", max_seq_length=MAX_LEN),
        "cls_dense_dot": st_saved.save_st(root / "cls-dense", "cls", dense=(64, "Tanh"), normalize=False,
                                          max_seq_length=MAX_LEN, similarity_fn_name="dot"),
        "lasttoken": st_saved.save_st(root / "last", "lasttoken", normalize=False, max_seq_length=MAX_LEN),
        "max": st_saved.save_st(root / "max", "max", normalize=False, max_seq_length=MAX_LEN),
        "mean_sqrt_len": st_saved.save_st(root / "mean-sqrt-len", "mean_sqrt_len_tokens", normalize=False,
                                          max_seq_length=MAX_LEN),
        "weightedmean": st_saved.save_st(root / "weightedmean", "weightedmean", max_seq_length=MAX_LEN),
        "ce_identity": st_saved.save_cross_encoder(root / "ce-identity", "Identity"),
    }


def vllm_embed(llm, texts):
    out = llm.embed(texts, use_tqdm=False, tokenization_kwargs={"truncate_prompt_tokens": -1})
    return np.asarray([o.outputs.embedding for o in out], dtype=np.float32)


@pytest.mark.parametrize(("name", "runner"), [("mean_normalize", "default"), ("cls_dense_dot", "default"),
                                              ("lasttoken", "default"), ("cls_dense_dot", "v1"),
                                              ("max", "default"), ("max", "v1"),
                                              ("mean_sqrt_len", "default"), ("mean_sqrt_len", "v1"),
                                              ("weightedmean", "default"), ("weightedmean", "v1")])
def test_embeddings_are_sentence_transformers(models, texts, in_process, name, runner):
    expected = st_saved.st_encode(models[name], texts)
    with vllm_runner(models[name], runner) as llm:
        assert llm.llm_engine.vllm_config.model_config.max_model_len == MAX_LEN
        got = vllm_embed(llm, texts)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL)


def test_bi_encoder_score_is_the_models_similarity(models, in_process):
    model = models["cls_dense_dot"]
    expected = st_saved.st_similarity(model, [QUERY] * len(DOCS), DOCS)
    with vllm_runner(model) as llm:
        got = [o.outputs.score for o in llm.score(QUERY, DOCS, use_tqdm=False)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL)


def test_cross_encoder_scores_are_predict(models, in_process):
    model = models["ce_identity"]
    expected = st_saved.ce_predict(model, [(QUERY, d) for d in DOCS])
    with vllm_runner(model) as llm:
        got = np.asarray([o.outputs.score for o in llm.score(QUERY, DOCS, use_tqdm=False)])
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL)


def test_server_serves_the_dense_model_as_sentence_transformers(models, texts):
    model = models["cls_dense_dot"]
    expected_vectors = st_saved.st_encode(model, texts)
    expected_scores = st_saved.st_similarity(model, [QUERY] * len(DOCS), DOCS)
    with VllmServer(model, name="st-cls-dense") as server:
        assert server.runner() == "MRV2"
        r = requests.post(server.url("/v1/embeddings"),
                          json={"input": texts, "truncate_prompt_tokens": -1}, timeout=120)
        assert r.status_code == 200, r.text
        got = np.asarray([d["embedding"] for d in r.json()["data"]], dtype=np.float32)
        np.testing.assert_allclose(got, expected_vectors, rtol=0, atol=TOL)
        r = requests.post(server.url("/score"), json={"queries": QUERY, "documents": DOCS}, timeout=120)
        assert r.status_code == 200, r.text
        scores = [d["score"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
        np.testing.assert_allclose(scores, expected_scores, rtol=0, atol=TOL)
