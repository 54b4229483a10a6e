"""Patch 0032: an ``encoding_format`` other than "float" on an endpoint that
returns JSON numbers and cannot encode them (/classify, /score, /rerank) is
refused naming the field, instead of being ignored; where the request has
the field (/v1/embeddings, /pooling) nothing changes. Through upstream's
request models and the pooling servings' request check
(``PoolingBaseServing._validate_request``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import TypeAdapter
from tests.unit.upstream_names import serve_context


def request_of(kind: str, **fields):
    from vllm.entrypoints.pooling.classify.protocol import ClassificationRequest
    from vllm.entrypoints.pooling.embed.protocol import EmbeddingRequest
    from vllm.entrypoints.pooling.pooling.protocol import PoolingRequest
    from vllm.entrypoints.pooling.scoring.protocol import RerankRequest, ScoreRequest

    types = {"classify": ClassificationRequest, "score": ScoreRequest, "rerank": RerankRequest,
             "embed": EmbeddingRequest, "pooling": PoolingRequest}
    body = {"classify": {"input": "a cat"}, "score": {"queries": "q", "documents": ["d"]},
            "rerank": {"query": "q", "documents": ["d"]}, "embed": {"input": "a cat"},
            "pooling": {"input": "a cat"}}[kind]
    return TypeAdapter(types[kind]).validate_python({"model": "m", **body, **fields})


def validate(request):
    from vllm.entrypoints.pooling.base.serving import PoolingBaseServing
    from vllm.pooling_params import PoolingParams

    ctx = serve_context(request, "m", "r", PoolingParams())
    PoolingBaseServing._validate_request(SimpleNamespace(max_model_len=512), ctx)


@pytest.mark.parametrize("kind", ["classify", "score", "rerank"])
@pytest.mark.parametrize("fmt", ["base64", "bytes"])
def test_encoding_format_refused_where_results_are_json_numbers(kind, fmt):
    with pytest.raises(ValueError, match=f"encoding_format='{fmt}' is not supported by this endpoint"):
        validate(request_of(kind, encoding_format=fmt))


@pytest.mark.parametrize("kind", ["classify", "score", "rerank"])
def test_float_or_no_encoding_format_accepted(kind):
    validate(request_of(kind, encoding_format="float"))
    validate(request_of(kind))


@pytest.mark.parametrize("kind", ["embed", "pooling"])
def test_endpoints_that_encode_keep_base64(kind):
    request = request_of(kind, encoding_format="base64")
    assert request.encoding_format == "base64"
    validate(request)
