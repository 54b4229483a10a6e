"""Issue 28 item 2 (patch 0045): models saved by sentence-transformers 6.2
are served as ``SentenceTransformer.encode`` / ``CrossEncoder.predict``
compute them, on the same saved files (``scripts.validation.checkpoints.st_saved``:
tiny random BERTs, fp32), within 1e-4.

Offline on MRV2 (vLLM's default, asserted) and on V1
(``VLLM_USE_V2_MODEL_RUNNER=0``): the settings are read by the engine's
config, whichever runner runs. Before 0045: Pooling(mean) + Normalize came
back as normalised CLS, the Dense layer was missing (128 values instead of
64), lasttoken pooling was CLS and normalised, the maximum length was 512
instead of 128 (so a long text kept 512 tokens where sentence-transformers
keeps 128), a dot-product model was scored by cosine, a CrossEncoder saved
with ``activation_fn=Identity()`` was scored with sigmoid (three labels:
tests/unit/test_sentence_transformers_settings.py), and the pooling modes
``max``, ``mean_sqrt_len_tokens`` and ``weightedmean`` were served as CLS.

The Dense model (Pooling(cls) + Dense(128->64, Tanh), not normalised,
scored by dot product) is saved with prompts and ``default_prompt_name``
too: text inputs get the default prompt, as ``encode`` prepends it
(``LLM.embed``, ``LLM.encode``, ``LLM.score`` offline; ``/v1/embeddings``,
``/pooling``, ``/score`` and Cohere ``/v2/embed``, where an ``input_type``
chooses its own prompt instead, through ``vllm serve``); token ids are
embedded as sent (before: every text was embedded without the prompt)."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from scripts.validation.checkpoints import st_saved
from scripts.validation.engine import vllm_runner
from scripts.validation.server import VllmServer

TOL = 1e-4
MAX_LEN = 128
QUERY = "what is the capital of france"
DOCS = ["paris is the capital and largest city of france", "the river flows north through the old town",
        "a man is playing a guitar"]
PROMPTS = {"query": "query: ", "document": "passage: "}


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
                                          max_seq_length=MAX_LEN, similarity_fn_name="dot", prompts=PROMPTS,
                                          default_prompt_name="query"),
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


# the Dense model on MRV2: test_default_prompt_is_applied_to_text_offline
@pytest.mark.parametrize(("name", "runner"), [("mean_normalize", "default"),
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


def test_cross_encoder_scores_are_predict(models, in_process):
    model = models["ce_identity"]
    expected = st_saved.ce_predict(model, [(QUERY, d) for d in DOCS])
    with vllm_runner(model) as llm:
        got = np.asarray([o.outputs.score for o in llm.score(QUERY, DOCS, use_tqdm=False)])
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL)


# ------------------------------------------------------------------ Dense model with prompts

@pytest.fixture(scope="module")
def prompted_expected(models, texts):
    """What sentence-transformers computes for the Dense model with prompts
    (default ``query``): ``encode`` (the default prompt),
    ``encode(prompt_name="document")``, ``encode(prompt="")`` (no prompt),
    the pairwise similarity (dot product) of encoded QUERY and DOCS; and the
    ids the tokenizer gives the texts with and without the default prompt."""
    from transformers import AutoTokenizer

    model = models["cls_dense_dot"]
    tok = AutoTokenizer.from_pretrained(str(model))
    return {
        "default": st_saved.st_encode(model, texts),
        "document": st_saved.st_encode(model, texts, prompt_name="document"),
        "none": st_saved.st_encode(model, texts, prompt=""),
        "scores": st_saved.st_similarity(model, [QUERY] * len(DOCS), DOCS),
        "prompted_ids": [tok(PROMPTS["query"] + t, truncation=True, max_length=MAX_LEN)["input_ids"]
                         for t in texts],
        "text_ids": [tok(t, truncation=True, max_length=MAX_LEN)["input_ids"] for t in texts],
    }


def test_default_prompt_is_applied_to_text_offline(models, texts, prompted_expected, in_process):
    from vllm.inputs import TextPrompt, TokensPrompt

    expected = prompted_expected
    # the prompt matters: without it, the embeddings are others
    assert np.abs(expected["default"] - expected["none"]).max() > 1e-2
    truncate = {"truncate_prompt_tokens": -1}
    with vllm_runner(models["cls_dense_dot"]) as llm:
        assert llm.llm_engine.vllm_config.model_config.max_model_len == MAX_LEN
        embedded = llm.embed(texts, use_tqdm=False, tokenization_kwargs=truncate)
        encoded = llm.encode([TextPrompt(prompt=t) for t in texts], pooling_task="embed", use_tqdm=False,
                             tokenization_kwargs=truncate)
        ids = llm.embed([TokensPrompt(prompt_token_ids=i) for i in expected["text_ids"]], use_tqdm=False)
        scores = [o.outputs.score for o in llm.score(QUERY, DOCS, use_tqdm=False)]
    assert [o.prompt_token_ids for o in embedded] == expected["prompted_ids"]
    for got in ([o.outputs.embedding for o in embedded], [o.outputs.data.tolist() for o in encoded]):
        got = np.asarray(got, dtype=np.float32)
        assert got.shape == (len(texts), 64)
        np.testing.assert_allclose(got, expected["default"], rtol=0, atol=TOL)
    # token ids are embedded as they are
    assert [o.prompt_token_ids for o in ids] == expected["text_ids"]
    got = np.asarray([o.outputs.embedding for o in ids], dtype=np.float32)
    np.testing.assert_allclose(got, expected["none"], rtol=0, atol=TOL)
    np.testing.assert_allclose(scores, expected["scores"], rtol=0, atol=TOL)


KEY = "st-key"
LIMITS = {"inputs": 8, "tokens": 850, "body": 16384}


@pytest.fixture(scope="module")
def guarded_server(models):
    """``vllm serve`` of the Dense model as an operator would run it in front of
    clients (issue 38, patches 0056-0058): with an API key and small request
    limits (8 inputs, 850 tokens, 16,384 body bytes); default runner."""
    with VllmServer(models["cls_dense_dot"], "--max-inputs-per-request", str(LIMITS["inputs"]),
                    "--max-tokens-per-request", str(LIMITS["tokens"]),
                    "--max-request-body-bytes", str(LIMITS["body"]),
                    name="st-cls-dense", api_key=KEY) as server:
        assert server.runner() == "MRV2"
        yield server


def test_server_serves_the_dense_model_with_its_default_prompt(guarded_server, texts, prompted_expected):
    expected = prompted_expected
    server = guarded_server

    def vectors(response, key):
        assert response.status_code == 200, response.text
        data = response.json()
        rows = data[key]["float"] if key == "embeddings" else [d[key] for d in data["data"]]
        return np.asarray(rows, dtype=np.float32)

    def post(path, body):
        return requests.post(server.url(path), json=body, headers=server.headers, timeout=120)

    got = vectors(post("/v1/embeddings", {"input": texts, "truncate_prompt_tokens": -1}), "embedding")
    np.testing.assert_allclose(got, expected["default"], rtol=0, atol=TOL)
    got = vectors(post("/pooling", {"input": texts, "task": "embed", "truncate_prompt_tokens": -1}), "data")
    np.testing.assert_allclose(got, expected["default"], rtol=0, atol=TOL)
    # Cohere: no input_type is the default prompt, an input_type its own prompt
    cohere = {"texts": texts, "embedding_types": ["float"], "truncate": "END"}
    got = vectors(post("/v2/embed", cohere), "embeddings")
    np.testing.assert_allclose(got, expected["default"], rtol=0, atol=TOL)
    got = vectors(post("/v2/embed", {**cohere, "input_type": "document"}), "embeddings")
    np.testing.assert_allclose(got, expected["document"], rtol=0, atol=TOL)
    # token ids are embedded as they are
    got = vectors(post("/v1/embeddings", {"input": expected["text_ids"]}), "embedding")
    np.testing.assert_allclose(got, expected["none"], rtol=0, atol=TOL)
    r = post("/score", {"queries": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    scores = [d["score"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
    np.testing.assert_allclose(scores, expected["scores"], rtol=0, atol=TOL)


# ------------------------------------------------------------------ API key and request limits (0056-0058)

# every pooling route of an embedding model, with a body of n inputs
def _bodies(n: int, text: str) -> dict[str, dict]:
    docs = [text] * n
    return {"/v1/embeddings": {"input": docs}, "/pooling": {"input": docs, "task": "embed"},
            "/v2/embed": {"texts": docs, "embedding_types": ["float"]},
            "/invocations": {"input": docs}, "/score": {"queries": QUERY, "documents": docs},
            "/v1/score": {"queries": QUERY, "documents": docs}, "/rerank": {"query": QUERY, "documents": docs},
            "/v1/rerank": {"query": QUERY, "documents": docs}, "/v2/rerank": {"query": QUERY, "documents": docs}}


def test_the_key_guards_every_route_but_the_probes(guarded_server):
    server = guarded_server
    for path, body in {**_bodies(1, DOCS[0]), "/tokenize": {"prompt": QUERY},
                       "/detokenize": {"tokens": [101, 102]}}.items():
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = requests.post(server.url(path), json=body, headers=headers, timeout=60)
            assert r.status_code == 401, (path, r.status_code)
            assert "'Authorization: Bearer <key>'" in r.json()["error"]["message"]
        r = requests.post(server.url(path), json=body, headers=server.headers, timeout=60)
        assert r.status_code == 200, (path, r.text)
    for path in ("/metrics", "/v1/models", "/docs", "/openapi.json", "/load"):
        assert requests.get(server.url(path), timeout=60).status_code == 401, path
        assert requests.get(server.url(path), headers=server.headers, timeout=60).status_code == 200, path
    for path in ("/health", "/ping", "/version"):
        assert requests.get(server.url(path), timeout=60).status_code == 200, path


def test_request_limits_on_every_pooling_route(guarded_server, texts):
    server = guarded_server
    long_text = texts[-1]  # about 400 tokens: truncated to the model's 128

    def post(path, body):
        return requests.post(server.url(path), json=body, headers=server.headers, timeout=120)

    for path, body in _bodies(LIMITS["inputs"] + 1, "a cat").items():
        r = post(path, body)
        assert r.status_code == 400, (path, r.text)
        # a bi-encoder embeds a score or rerank request's query as an input of its own
        inputs = LIMITS["inputs"] + 1 + ("query" in body or "queries" in body)
        assert r.json()["error"]["message"].startswith(
            f"This request has {inputs} inputs, more than this server's limit of {LIMITS['inputs']} per request"), path
        assert "--max-inputs-per-request" in r.json()["error"]["message"]
    # 8 inputs of 128 tokens (the prompt and the truncated text): 1,024 tokens; with
    # a query, 7 such documents and the query (about 12 tokens): about 908
    for path, body in _bodies(LIMITS["inputs"], long_text).items():
        if "query" in body or "queries" in body:
            body = _bodies(LIMITS["inputs"] - 1, long_text)[path]
        body = {**body, "truncate_prompt_tokens": -1} if "texts" not in body else {**body, "truncate": "END"}
        r = post(path, body)
        assert r.status_code == 400, (path, r.text)
        message = r.json()["error"]["message"]
        assert f"more than this server's limit of {LIMITS['tokens']} per request" in message, (path, message)
        assert "--max-tokens-per-request" in message
    r = post("/v1/embeddings", {"input": ["x" * (LIMITS["body"] + 1000)]})
    assert r.status_code == 413
    assert "--max-request-body-bytes" in r.json()["error"]["message"]
    # a malformed body names the field, on /invocations too (0063: before, a list of
    # Python type names there), and a body nested too deep for the decoder says it is
    # no JSON (a 500 there before)
    for path in ("/v1/embeddings", "/invocations"):
        r = post(path, {"input": ["a cat", 5]})
        assert r.status_code == 400, (path, r.text)
        assert r.json()["error"]["param"] == "body.input.1", (path, r.text)
    r = requests.post(server.url("/invocations"), data=b'{"input":' + b"[" * 5000 + b"]" * 5000 + b"}",
                      headers={**server.headers, "Content-Type": "application/json"}, timeout=120)
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("The request body is not valid JSON (")
    # and the server serves the next request
    r = post("/v1/embeddings", {"input": ["a cat"] * LIMITS["inputs"]})
    assert r.status_code == 200
    assert len(r.json()["data"]) == LIMITS["inputs"]
