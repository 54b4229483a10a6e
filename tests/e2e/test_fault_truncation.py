"""Issue 28 item 3 (patch 0046): truncation keeps its promise.

- ``truncation_side`` set explicitly cuts like ``tokenizer(text,
  truncation=True, max_length=n)`` with that side: the text's tokens go,
  the [CLS] and [SEP] the tokenizer adds stay (before: "right" dropped
  [SEP], "left" dropped [CLS]); the same for Cohere ``/v2/embed``
  ``truncate: START`` / ``END``. all-MiniLM-L6-v2 (real weights), the
  embedding of the kept ids against the offline engine on the ids
  transformers keeps, 1e-5; V1 and MRV2 (default) offline, MRV2 through
  ``vllm serve``.
- ``max_embed_len`` bounds the input with chunked processing on
  (``--max-model-len 128``, ``max_embed_len`` 300): a 398-token input is a
  400 naming the limit, a 200-token one is embedded (before: any length was
  accepted).
- ``max_tokens_per_doc`` on a decoder reranker without separator
  (``use_sep_token: false``, tiny ``Qwen3ForSequenceClassification``): a
  limit that cuts nothing leaves the prompt and the score as they are
  (before: the special tokens vanished), transformers' score within 1e-4.
The re-tokenising of ``max_tokens_per_*`` cuts (byte-level BPE) is in
``tests/unit/test_token_limits.py``."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from scripts.validation.engine import vllm_runner
from scripts.validation.checkpoints.models import MODELS, minilm_path
from scripts.validation.server import VllmServer
from scripts.validation.checkpoints.zoo import make_hf
from tests.unit.upstream_names import serve_context, server_pre_process

TOL = 1e-5
MAX_MODEL_LEN = 128
MAX_EMBED_LEN = 300
KEEP = 12
CHUNKED = {"enable_chunked_processing": True, "max_embed_len": MAX_EMBED_LEN}


@pytest.fixture(scope="module")
def tokenizers():
    """MiniLM's tokenizer truncating from each side, as transformers does."""
    from transformers import AutoTokenizer

    return {side: AutoTokenizer.from_pretrained(str(minilm_path()), truncation_side=side)
            for side in ("left", "right")}


@pytest.fixture(scope="module")
def text(sts):
    return " ".join(sts.sentences[:3])


def kept_ids(tokenizers, text, side, n=KEEP):
    """transformers' ids of ``text`` truncated to ``n`` from ``side``."""
    ids = tokenizers[side](text, truncation=True, max_length=n)["input_ids"]
    assert len(ids) == n and ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP]
    return ids


def embed_ids(llm, ids) -> np.ndarray:
    (out,) = llm.embed([{"prompt_token_ids": ids}], use_tqdm=False)
    return np.asarray(out.outputs.embedding, dtype=np.float32)


@pytest.fixture(scope="module", params=["default", "v1"])
def engine(request, in_process):
    """MiniLM, max_model_len 128, chunked processing with max_embed_len 300,
    on MRV2 (vLLM's default) or V1 (``vllm_runner`` asserts which ran)."""
    from vllm.config import PoolerConfig

    with vllm_runner(minilm_path(), request.param, max_model_len=MAX_MODEL_LEN,
                     pooler_config=PoolerConfig(**CHUNKED)) as llm:
        yield llm


@pytest.mark.parametrize("side", ["right", "left"])
def test_explicit_side_keeps_the_special_tokens_offline(engine, tokenizers, text, side):
    ids = kept_ids(tokenizers, text, side)
    (out,) = engine.embed([text], use_tqdm=False,
                          tokenization_kwargs={"truncate_prompt_tokens": KEEP, "truncation_side": side})
    assert out.prompt_token_ids == ids
    np.testing.assert_allclose(np.asarray(out.outputs.embedding), embed_ids(engine, ids), rtol=0, atol=TOL)


def serve_embedding(llm, request):
    """The server's ``/v1/embeddings`` pre-processing of ``request`` (chunked
    processing on) through the io-processor it builds, on this engine: each
    engine request's (token ids, params)."""

    io = llm.pooling_io_processors["embed"]
    ctx = serve_context(request, "minilm", "truncation", io.create_pooling_params(request))
    return server_pre_process(io, ctx)


def test_max_embed_len_is_enforced_with_chunked_processing(engine, tokenizers, sts):
    from vllm.entrypoints.pooling.embed.protocol import EmbeddingCompletionRequest
    from vllm.exceptions import VLLMValidationError

    words = tokenizers["right"](" ".join(sts.sentences[:60]), add_special_tokens=False)["input_ids"]
    too_long, fits = [101, *words[:396], 102], [101, *words[:198], 102]
    with pytest.raises(VLLMValidationError) as e:
        serve_embedding(engine, EmbeddingCompletionRequest(model="minilm", input=too_long))
    assert f"maximum context length is {MAX_EMBED_LEN} tokens" in str(e.value)
    assert "398 input tokens" in str(e.value)
    inputs = serve_embedding(engine, EmbeddingCompletionRequest(model="minilm", input=fits))
    assert [len(ids) for ids, _ in inputs] == [128, 72]  # two chunks


def test_server_truncation_keeps_the_special_tokens(tokenizers, text):
    # transformers' mean of the kept ids' last hidden states, normalised (MiniLM's
    # pooling): not an offline engine, which would read the runner choice of the
    # module's engine still open in this process (vLLM caches its environment
    # variables while an engine lives)
    from scripts.validation.references import embed

    expected = {side: embed(minilm_path(), [kept_ids(tokenizers, text, side)], pooling="MEAN")[0]
                for side in ("right", "left")}
    args = ["--max-model-len", str(MAX_MODEL_LEN), "--pooler-config",
            '{"enable_chunked_processing": true, "max_embed_len": %d}' % MAX_EMBED_LEN]
    with VllmServer(minilm_path(), *args, name="minilm-truncation") as server:
        assert server.runner() == "MRV2"
        for side in ("right", "left"):
            r = requests.post(server.url("/v1/embeddings"), timeout=120, json={
                "input": [text], "truncate_prompt_tokens": KEEP, "truncation_side": side})
            assert r.status_code == 200, r.text
            got = np.asarray(r.json()["data"][0]["embedding"], dtype=np.float32)
            np.testing.assert_allclose(got, expected[side], rtol=0, atol=TOL, err_msg=side)
        for truncate, side in (("START", "left"), ("END", "right")):
            r = requests.post(server.url("/v2/embed"), timeout=120, json={
                "texts": [text], "truncate": truncate, "max_tokens": KEEP, "embedding_types": ["float"]})
            assert r.status_code == 200, r.text
            got = np.asarray(r.json()["embeddings"]["float"][0], dtype=np.float32)
            np.testing.assert_allclose(got, expected[side], rtol=0, atol=TOL, err_msg=truncate)
        words = tokenizers["right"](" ".join([text] * 40), add_special_tokens=False)["input_ids"][:396]
        r = requests.post(server.url("/v1/embeddings"), timeout=120, json={"input": [101, *words, 102]})
        assert r.status_code == 400 and f"maximum context length is {MAX_EMBED_LEN} tokens" in r.text, r.text


# ------------------------------------------------------------------ decoder reranker without separator

QUERY = "what is the capital of france"
DOC = "paris is the capital and largest city of france"


@pytest.fixture(scope="module")
def reranker():
    return make_hf(MODELS / "tiny-qwen3-reranker-no-sep", "Qwen3Config", "Qwen3ForSequenceClassification",
                   decoder=True, num_labels=1, pad_token_id=0, use_sep_token=False)


def test_doc_limit_that_cuts_nothing_keeps_the_prompt(reranker, in_process):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from vllm import PoolingParams

    tok = AutoTokenizer.from_pretrained(str(reranker))
    ids = tok(QUERY + DOC)["input_ids"]
    assert ids[0] == 101 and ids[-1] == 102
    net = AutoModelForSequenceClassification.from_pretrained(str(reranker), dtype=torch.float32).eval()
    with torch.inference_mode():
        logit = float(net(input_ids=torch.tensor([ids])).logits[0, 0])
    expected = 1.0 / (1.0 + np.exp(-logit))
    with vllm_runner(reranker, "v2") as llm:
        assert llm.llm_engine.vllm_config.model_config.use_sep_token is False
        plain = llm.score(QUERY, DOC, use_tqdm=False)[0]
        limited = llm.score(QUERY, DOC, use_tqdm=False,
                            pooling_params=PoolingParams(extra_kwargs={"max_tokens_per_doc": 50}))[0]
    assert plain.prompt_token_ids == limited.prompt_token_ids == ids
    assert abs(limited.outputs.score - expected) <= 1e-4
    assert abs(plain.outputs.score - expected) <= 1e-4
