"""Cross-encoder token types follow the tokens that are kept (issue 18 item
4, patch 0023), without an engine.

The renderer's post-tokenization step (``TokenizeParams.apply_post_tokenization``:
padding, truncation from the requested side) applies to a prompt's
``token_type_ids`` as it applies to its ``prompt_token_ids``, and every
cross-encoder path uses it: the offline ``LLM.score`` rendering and the
server's ``/score`` and ``/rerank`` pre-processing, both taken from the
io-processor the engine builds (``CrossEncoderIOProcessor`` over the
renderer of a real config, tiny BERT cross-encoder). Before 0023 the offline
path kept the type boundary of the untruncated pair: a pair left-truncated
to its last 24 tokens (document tokens only, all type 1) had its first 7
tokens typed 0.

A text pair with an explicit ``truncation_side`` is cut as the tokenizer
cuts it (patch 0046): ``tokenizer(query, document, truncation=True,
max_length=24)`` with that side, the tokenizer's default strategy for pairs
(longest_first), [CLS] and both [SEP] kept, the types the tokenizer gives.
Before 0046 the pair's ids were sliced: "left" kept the last 24 tokens (no
[CLS], no query), "right" the first 24 (no closing [SEP]); this test's
expectation until 0046 was that slicing, typed by position.
"""

from __future__ import annotations

import pytest

from vllm.pooling_params import PoolingParams
from vllm.renderers import TokenizeParams

from scripts.series.lines import get_line
from tests.unit.upstream_names import chat_template_config, serve_context, server_pre_process

QUERY = "what is the capital of france"
LONG_DOC = "the city has many museums and old bridges along its river banks " * 4
TRUNCATE = 24


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    from scripts.validation.checkpoints.zoo import make_tiny_bert

    return str(make_tiny_bert(tmp_path_factory.mktemp("ce-types") / "bert-ce", "seq_cls", num_labels=1))


@pytest.fixture(scope="module")
def pair(cross_encoder):
    """transformers' tokenisation of the pair: (ids, token types), untruncated."""
    from transformers import AutoTokenizer

    enc = AutoTokenizer.from_pretrained(cross_encoder)(QUERY, LONG_DOC)
    assert len(enc["input_ids"]) > TRUNCATE + 10
    return enc["input_ids"], enc["token_type_ids"]


# The base's seam (the renderer's post-tokenization step, patched by 0023); from 0.27.0
# upstream cuts and pads the types elsewhere: the paths below hold on every line.
@pytest.mark.line("0.26.0")
@pytest.mark.parametrize("side", ["left", "right"])
def test_truncation_cuts_token_types_with_the_tokens(pair, side):
    ids, types = pair
    params = TokenizeParams(max_total_tokens=512, max_output_tokens=0,
                            truncate_prompt_tokens=TRUNCATE, truncation_side=side)
    prompt = params.apply_post_tokenization(None, {"prompt_token_ids": list(ids),
                                                   "token_type_ids": list(types)})
    kept = slice(-TRUNCATE, None) if side == "left" else slice(None, TRUNCATE)
    assert prompt["prompt_token_ids"] == ids[kept]
    assert prompt["token_type_ids"] == types[kept]


@pytest.mark.line("0.26.0")
def test_padding_extends_token_types_with_the_last_type(cross_encoder, pair):
    """Padded positions take the type of the last token (what the server's
    pre-processing did before 0023; the type boundary stays one index)."""
    from transformers import AutoTokenizer

    ids, types = pair
    tok = AutoTokenizer.from_pretrained(cross_encoder)
    params = TokenizeParams(max_total_tokens=512, max_output_tokens=0, pad_prompt_tokens=len(ids) + 3)
    prompt = params.apply_post_tokenization(tok, {"prompt_token_ids": list(ids), "token_type_ids": list(types)})
    assert prompt["prompt_token_ids"] == ids + [tok.pad_token_id] * 3
    assert prompt["token_type_ids"] == types + [types[-1]] * 3


@pytest.fixture
def io_processor(real_config, cross_encoder):
    from vllm.entrypoints.pooling.scoring.io_processor import CrossEncoderIOProcessor
    from vllm.renderers import renderer_from_config

    config = real_config(cross_encoder, "pooling")
    return CrossEncoderIOProcessor(config, renderer_from_config(config), chat_template_config())


def offline_inputs(io, side):
    """What ``LLM.score(QUERY, LONG_DOC, tokenization_kwargs=...)`` renders."""
    from vllm.entrypoints.pooling.typing import OfflineScoringInputsContext

    ctx = OfflineScoringInputsContext(
        pooling_task="classify", tokenization_kwargs={"truncate_prompt_tokens": TRUNCATE,
                                                      "truncation_side": side},
        lora_request=None, priorities=None, scoring_data=io.valid_inputs(QUERY, LONG_DOC),
        chat_template=None, pooling_params=PoolingParams(task="classify"))
    factory, n = io.get_request_factory_offline(ctx)
    rendered = [io.render(p) for p in factory()]
    assert n == len(rendered) == 1
    return rendered[0]["prompts"]["prompt_token_ids"], rendered[0]["params"]


def server_inputs(io, request):
    """What ``/score`` and ``/rerank`` pre-process for ``request``."""

    ctx = serve_context(request, "tiny", "r", io.create_pooling_params(request))
    ((ids, params),) = server_pre_process(io, ctx)
    return ids, params


@pytest.mark.parametrize("side", ["left", "right"])
def test_every_cross_encoder_path_types_the_kept_tokens(io_processor, cross_encoder, side):
    from transformers import AutoTokenizer

    from vllm.entrypoints.pooling.scoring.protocol import RerankRequest, ScoreDataRequest

    tok = AutoTokenizer.from_pretrained(cross_encoder, truncation_side=side)
    enc = tok(QUERY, LONG_DOC, truncation=True, max_length=TRUNCATE)
    kept_ids, types = enc["input_ids"], enc["token_type_ids"]
    # [CLS] query [SEP] document [SEP], the document cut (longest_first)
    query_ids = tok(QUERY, add_special_tokens=False)["input_ids"]
    assert len(kept_ids) == TRUNCATE and kept_ids[0] == tok.cls_token_id and kept_ids[-1] == tok.sep_token_id
    assert kept_ids[1:len(query_ids) + 2] == [*query_ids, tok.sep_token_id]
    # the first token of type 1: the document's first kept token
    boundary = types.index(1)
    assert boundary == len(query_ids) + 2 and set(types[boundary:]) == {1}
    # how the line hands the types to the engine: before 0.34.0 the index of the first
    # type-1 token; from 0.34.0 the half-open range [first, end) of the type-1 tokens
    # (scoring/utils.py's compress_token_type_ids; the types run to the end here)
    compressed_types = boundary if get_line().name in ("0.26.0", "0.32.0") else (boundary, len(types))
    common = dict(model="tiny", truncate_prompt_tokens=TRUNCATE, truncation_side=side)
    paths = {
        "offline": offline_inputs(io_processor, side),
        "/score": server_inputs(io_processor, ScoreDataRequest(data_1=QUERY, data_2=[LONG_DOC], **common)),
        "/rerank": server_inputs(io_processor, RerankRequest(query=QUERY, documents=[LONG_DOC], **common)),
    }
    for path, (got_ids, params) in paths.items():
        assert list(got_ids) == kept_ids, path
        assert params.extra_kwargs["compressed_token_type_ids"] == compressed_types, path
