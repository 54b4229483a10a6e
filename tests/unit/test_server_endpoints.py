"""Patch 0031: the app ``vllm serve`` builds (upstream's ``build_app``, no
engine needed) answers a pooling endpoint its model does not serve with a
404 whose message names the endpoint, what it needs and what the server
runs, instead of a bare "Not Found"; the endpoints it does serve are
routed as before."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def minilm_app(minilm):
    from fastapi.testclient import TestClient

    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.openai.api_server import build_app
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", minilm])
    config = EngineArgs(model=minilm, runner="pooling").create_engine_config()
    tasks = ("embed", "token_embed")  # BertModel: what the engine reports as supported
    return TestClient(build_app(args, tasks, config.model_config), raise_server_exceptions=False)


@pytest.mark.parametrize("path", ["/classify"])
def test_unserved_endpoint_names_the_problem(minilm_app, path):
    r = minilm_app.post(path, json={"model": "m", "input": "a cat"})
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["type"] == "NotFoundError"
    assert error["message"] == (
        f"This server's model does not serve {path}, which needs a classification model "
        "(the 'classify' task). It runs the pooling task 'embed' (the model supports 'embed', "
        "'token_embed'); its pooling endpoints: /pooling, /v1/embeddings, /v2/embed, /score, "
        "/v1/score, /rerank, /v1/rerank, /v2/rerank.")


def test_served_endpoints_keep_their_routes(minilm_app):
    """/v1/embeddings is still the embedding route: a malformed body gets its
    request validation (400), not the unserved-endpoint answer."""
    r = minilm_app.post("/v1/embeddings", content=b'{"model": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert "JSON decode error" in r.json()["error"]["message"]
