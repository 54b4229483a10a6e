"""Issue 18, items 2 and 4 (patches 0021, 0023) on a tiny BERT cross-encoder
(``BertForSequenceClassification``, 1 label, type vocabulary 2, random
weights), V1 and MRV2, against transformers (fp32, same weights), 1e-4.

Item 2: ``use_activation=False`` switches off the task's final activation
(the sigmoid) only. Before 0021 it also removed the tanh of BERT's pooler
(dense + tanh, built as a pooler head whose "activation" was the tanh), so
``LLM.classify`` and ``LLM.score`` returned transformers' logit without that
layer.

Item 4: a long pair truncated to 24 tokens keeps the tokens, and the token
types, that ``tokenizer(query, document, truncation=True, max_length=24)``
keeps with that truncation side: [CLS] query [SEP] the document's first
(``"right"``) or last (``"left"``) tokens [SEP] (issue 28 item 3, patch
0046; before it the pair's ids were sliced, and this test expected the
slice: "left" kept the last 24 tokens, document tokens only, without [CLS]
and the query). Before 0023 the offline ``LLM.score`` path took the type
boundary from the untruncated pair; the server's ``/score`` and ``/rerank``
pre-processing (driven here through the same io-processor the server
builds, on this engine) was right and must stay so. The pair checks need
the token types to reach the model: MRV2 passes them since 0010."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scripts.validation.engine import vllm_runner
from scripts.validation.checkpoints.zoo import make_tiny_bert
from tests.unit.upstream_names import serve_context, server_pre_process

TOL = 1e-4
TEXT = "terrible service, never again"
QUERY = "what is the capital of france"
DOCS = ["paris is the capital and largest city of france",
        "the river flows north through the old town"]
LONG_DOC = "the city has many museums and old bridges along its river banks " * 4
TRUNCATE = 24


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("fault-ce") / "bert-ce", "seq_cls", num_labels=1)


@pytest.fixture(scope="module")
def hf(model):
    """The transformers model and tokenizer on the same weights, fp32."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    net = AutoModelForSequenceClassification.from_pretrained(str(model), dtype=torch.float32).eval()
    return tok, net


def hf_logit(hf, input_ids, token_type_ids) -> float:
    _, net = hf
    with torch.inference_mode():
        out = net(input_ids=torch.tensor([input_ids]), token_type_ids=torch.tensor([token_type_ids]))
    return float(out.logits[0, 0])


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


@pytest.fixture(scope="module", params=["v2", "v1"])
def engine(request, model, in_process):
    """(runner choice, LLM): MRV2 as asked, or V1 (``vllm_runner`` asserts which ran)."""
    with vllm_runner(model, request.param) as llm:
        yield request.param, llm


def test_classify_activation_off_keeps_the_pooler_layers(engine, hf):
    from vllm import PoolingParams

    _, llm = engine
    tok, _ = hf
    enc = tok(TEXT)
    logit = hf_logit(hf, enc["input_ids"], enc["token_type_ids"])
    off = llm.classify([TEXT], pooling_params=PoolingParams(use_activation=False), use_tqdm=False)
    on = llm.classify([TEXT], use_tqdm=False)
    assert abs(off[0].outputs.probs[0] - logit) <= TOL
    assert abs(on[0].outputs.probs[0] - sigmoid(logit)) <= TOL


def test_score_activation_off_is_the_logit(engine, hf):
    from vllm import PoolingParams

    _, llm = engine
    tok, _ = hf
    logits = []
    for doc in DOCS:
        enc = tok(QUERY, doc)
        logits.append(hf_logit(hf, enc["input_ids"], enc["token_type_ids"]))
    off = llm.score(QUERY, DOCS, pooling_params=PoolingParams(use_activation=False), use_tqdm=False)
    on = llm.score(QUERY, DOCS, use_tqdm=False)
    np.testing.assert_allclose(np.array([o.outputs.score for o in off]), logits, rtol=0, atol=TOL)
    np.testing.assert_allclose(np.array([o.outputs.score for o in on]), sigmoid(logits), rtol=0, atol=TOL)


def truncated_reference(hf, side):
    """transformers' tokenizer truncating the pair to TRUNCATE tokens from
    ``side`` (its default strategy, longest_first) and the model's score of
    what it keeps: (ids, sigmoid of the logit)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf[0].name_or_path, truncation_side=side)
    enc = tok(QUERY, LONG_DOC, truncation=True, max_length=TRUNCATE)
    ids, types = enc["input_ids"], enc["token_type_ids"]
    assert len(tok(QUERY, LONG_DOC)["input_ids"]) > TRUNCATE + 10
    assert len(ids) == TRUNCATE and ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert set(types) == {0, 1}
    return ids, float(sigmoid(hf_logit(hf, ids, types)))


@pytest.mark.parametrize("side", ["left", "right"])
def test_truncated_pair_offline_score(engine, hf, side):
    _, llm = engine
    ids, expected = truncated_reference(hf, side)
    out = llm.score(QUERY, LONG_DOC, use_tqdm=False,
                    tokenization_kwargs={"truncate_prompt_tokens": TRUNCATE, "truncation_side": side})
    assert out[0].prompt_token_ids == ids
    assert abs(out[0].outputs.score - expected) <= TOL


def serve(llm, request_obj):
    """The server's cross-encoder pre-processing of ``request_obj`` (the
    io-processor ``/score`` and ``/rerank`` use), its engine inputs and
    pooling parameters run on this engine; returns (token ids, scores)."""

    io = llm.pooling_io_processors["cross-encoder"]
    ctx = serve_context(request_obj, "tiny", "faults18", io.create_pooling_params(request_obj))
    inputs = server_pre_process(io, ctx)
    outputs = llm.classify([{"prompt_token_ids": ids} for ids, _ in inputs],
                           pooling_params=[params for _, params in inputs], use_tqdm=False)
    return [ids for ids, _ in inputs], [o.outputs.probs[0] for o in outputs]


@pytest.mark.parametrize("side", ["left", "right"])
def test_truncated_pair_server_score_and_rerank(engine, hf, side):
    from vllm.entrypoints.pooling.scoring.protocol import RerankRequest, ScoreDataRequest

    _, llm = engine
    ids, expected = truncated_reference(hf, side)
    for req in (ScoreDataRequest(model="tiny", data_1=QUERY, data_2=[LONG_DOC],
                                 truncate_prompt_tokens=TRUNCATE, truncation_side=side),
                RerankRequest(model="tiny", query=QUERY, documents=[LONG_DOC],
                              truncate_prompt_tokens=TRUNCATE, truncation_side=side)):
        got_ids, scores = serve(llm, req)
        assert got_ids == [ids], type(req).__name__
        assert abs(scores[0] - expected) <= TOL, type(req).__name__
