"""Patches 0057 and 0058: limits per pooling request, and a malformed body's
400 that names the field.

0057: ``PoolingRequestLimits`` (``vllm.entrypoints.pooling.limits``), the
limits every pooling route checks in ``PoolingBaseServing._preprocessing``
(inputs, tokens; the end-to-end check on every route is
tests/e2e/test_fault_st_settings.py's server), and ``--max-request-body-bytes``
on the app ``vllm serve`` builds: a 413 naming the flag, declared or chunked.
0058: the 400 of a body that fails validation names the field at fault, the
element and what was sent (before: "39 validation errors" across every form
of ``input`` and of the request)."""

from __future__ import annotations

import pytest

from tests.unit.upstream_names import serve_cli, server_app_builders

pytestmark = pytest.mark.line("0.32.0", "0.34.0")


def _app(model: str, cli: list[str]):
    from fastapi.testclient import TestClient

    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    make_arg_parser, build_app = server_app_builders()
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", model, *cli])
    config = EngineArgs(model=model, runner="pooling").create_engine_config()
    return TestClient(build_app(args, ("embed", "token_embed"), config.model_config),
                      raise_server_exceptions=False)


@pytest.fixture(scope="module")
def app(minilm):
    return _app(minilm, ["--max-request-body-bytes", "2000"])


# ------------------------------------------------------------------ 0057

def test_serve_flags_and_their_defaults(minilm):
    make_arg_parser, _ = serve_cli()
    from vllm.entrypoints.pooling.base.serving import PoolingBaseServing
    from vllm.entrypoints.pooling.limits import PoolingRequestLimits
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    args = parser.parse_args(["--model", minilm])
    assert (args.max_inputs_per_request, args.max_tokens_per_request, args.max_request_body_bytes) == (
        2048, 300000, 33554432)
    assert PoolingRequestLimits.from_args(args) == PoolingRequestLimits(2048, 300000)
    assert PoolingBaseServing.request_limits == PoolingRequestLimits(2048, 300000)
    args = parser.parse_args(["--model", minilm, "--max-inputs-per-request", "8",
                              "--max-tokens-per-request", "0"])
    assert PoolingRequestLimits.from_args(args) == PoolingRequestLimits(8, 0)


def test_a_negative_limit_is_refused_at_start_up(minilm):
    make_arg_parser, validate_parsed_serve_args = serve_cli()
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--model", minilm, "--max-inputs-per-request", "-1"])
    with pytest.raises(ValueError, match=r"--max-inputs-per-request must be 0 \(no limit\) or a positive "
                                         r"integer, got -1"):
        validate_parsed_serve_args(args)


def test_inputs_over_the_limit_name_the_limit_and_the_flag():
    from vllm.entrypoints.pooling.limits import PoolingRequestLimits
    from vllm.exceptions import VLLMValidationError

    limits = PoolingRequestLimits(max_inputs=8, max_tokens=100)
    limits.check_inputs(8)
    with pytest.raises(VLLMValidationError, match="This request has 9 inputs, more than this server's limit "
                                                  "of 8 per request.*--max-inputs-per-request") as raised:
        limits.check_inputs(9)
    assert raised.value.parameter == "input"
    PoolingRequestLimits(max_inputs=0).check_inputs(10**6)  # 0: no limit


def test_tokens_are_counted_over_every_prompt_form():
    import torch

    from vllm.entrypoints.pooling.limits import PoolingRequestLimits, count_prompt_tokens
    from vllm.exceptions import VLLMValidationError

    assert count_prompt_tokens({"prompt_token_ids": [1, 2, 3]}) == 3
    assert count_prompt_tokens({"prompt_embeds": torch.zeros(5, 4)}) == 5
    assert count_prompt_tokens({"encoder_prompt": {"prompt_token_ids": [1, 2]},
                                "decoder_prompt": {"prompt_token_ids": [3]}}) == 3
    limits = PoolingRequestLimits(max_inputs=8, max_tokens=100)
    prompts = [{"prompt_token_ids": list(range(50))}, {"prompt_token_ids": list(range(50))}]
    limits.check_tokens(prompts)
    with pytest.raises(VLLMValidationError, match="This request has 101 tokens in all, more than this "
                                                  "server's limit of 100 per request.*--max-tokens-per-request"):
        limits.check_tokens([*prompts, {"prompt_token_ids": [7]}])


def test_a_body_over_the_limit_is_413_naming_the_flag(app):
    body = b'{"input": ["' + b"x" * 3000 + b'"]}'  # 3,015 bytes
    response = app.post("/v1/embeddings", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["message"] == (
        "The request body is 3015 bytes, more than this server's limit of 2000 bytes; send fewer or "
        "shorter inputs per request, or raise the limit with --max-request-body-bytes.")


def test_a_chunked_body_over_the_limit_is_413(app):
    def chunks():
        for _ in range(10):
            yield b"x" * 300

    response = app.post("/pooling", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert "--max-request-body-bytes" in response.json()["error"]["message"]


def test_a_chunked_body_under_the_limit_reaches_the_app(app):
    """Read whole by the middleware and handed on: validation sees the body."""
    def chunks():
        yield b'{"input": '
        yield b'[1, "x"]}'

    response = app.post("/v1/embeddings", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "body.input.1"


# ------------------------------------------------------------------ 0058

@pytest.mark.parametrize("path, body, message, param", [
    ("/v1/embeddings", {"input": ["a", 5, None]},
     "Invalid request body: input.1: Input should be a valid string; got 5 (a number); input.2: Input should "
     "be a valid string; got null; input takes one of: list[int], list[list[int]], str, list[str]",
     "body.input.1"),
    ("/v1/embeddings", {"input": [[1, 2], [3, "x"]]},
     "Invalid request body: input.1.1: Input should be a valid integer, unable to parse string as an "
     "integer; got 'x' (a string); input takes one of: list[int], list[list[int]], str, list[str]",
     "body.input.1.1"),
    ("/pooling", {"input": {"x": 1}},
     "Invalid request body: input: Input should be a valid list; got an object with 1 keys; input takes "
     "one of: list[int], list[list[int]], str, list[str]", "body.input"),
    ("/v2/embed", {"texts": [1]},
     "Invalid request body: texts.0: Input should be a valid string; got 1 (a number)", "body.texts.0"),
    ("/rerank", {"query": "q"}, "Invalid request body: documents: this field is required", "body.documents"),
    ("/v1/embeddings", [1, 2],
     "Invalid request body: body: Input should be a valid dictionary or object to extract fields from; got "
     "a list of 2 items", "body"),
])
def test_a_malformed_body_names_the_field(app, path, body, message, param):
    response = app.post(path, json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == message
    assert response.json()["error"]["param"] == param


def test_a_field_at_fault_in_every_form_of_the_request_comes_first(app):
    response = app.post("/v1/embeddings", json={"input": "a", "encoding_format": "bad"})
    error = response.json()["error"]
    assert error["param"] == "body.encoding_format"
    assert error["message"].startswith("Invalid request body: encoding_format: Input should be 'float', "
                                       "'base64', 'bytes' or 'bytes_only'; got 'bad' (a string)")


def test_a_body_that_is_not_json_says_so(app):
    response = app.post("/v1/embeddings", content=b'{"input": [1,', headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "The request body is not valid JSON (Expecting value at character 13); send a JSON object with the "
        "fields of this endpoint.")


# ------------------------------------------------------------------ 0063

@pytest.mark.parametrize("body", [
    b'{"input": [1,',  # a syntax error
    b'\xff{"input": "a"}',  # not UTF-8
    b'{"input": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # deeper than the decoder's recursion limit: 500 before
], ids=["syntax", "not-utf8", "nested-5000"])
def test_an_invocations_body_that_is_not_json_says_so(minilm, body):
    app = _app(minilm, [])
    response = app.post("/invocations", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith("The request body is not valid JSON (")
    assert error["message"].endswith("; send a JSON object with the fields of this endpoint.")
    assert error["param"] == "body"
