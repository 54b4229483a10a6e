"""Patch 0031: a pooling request for a task or endpoint the server does not
run is answered with a message naming the problem and the fix.

- The app ``vllm serve`` builds (upstream's ``build_app``, no engine needed)
  answers a pooling endpoint its model does not serve with a 404 whose
  message names the endpoint, what it needs and what the server runs,
  instead of a bare "Not Found"; the endpoints it does serve are routed as
  before. Checked for an embedding model (all-MiniLM-L6-v2), a multi-label
  classifier and a cross-encoder (MiniLM converted to classification, 3 and
  1 labels: only the engine config is built, no weights are loaded).
- ``/pooling`` (``ServingPooling``) and ``LLM.encode`` (``PoolingOfflineMixin``)
  with a task the model supports but the server/engine does not run say
  which task runs and how to run the other; an unsupported task keeps
  upstream's message with its missing separator added. ``/pooling`` refuses
  the task with the exception class the release's check raises for its
  other request errors: a ``ValueError`` up to 0.28.0; from 0.29.0 a
  ``VLLMValidationError`` naming ``parameter="task"`` (a ``VLLMClientError``,
  no longer a ``ValueError``, since 0.27.0; its ``str`` ends with
  `` (parameter=task)``)."""

from __future__ import annotations

import pytest

from tests.unit.upstream_names import server_app_builders

EMBED_ENDPOINTS = "/pooling, /v1/embeddings, /v2/embed, /score, /v1/score, /rerank, /v1/rerank, /v2/rerank"
SCORE_NEEDS = ("a cross-encoder (a classification model with one label), an embedding model or a "
               "late-interaction model")


def _app(model: str, tasks: tuple, **engine_args):
    from fastapi.testclient import TestClient

    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    make_arg_parser, build_app = server_app_builders()

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", model])
    config = EngineArgs(model=model, runner="pooling", **engine_args).create_engine_config()
    return TestClient(build_app(args, tasks, config.model_config), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def minilm_app(minilm):
    return _app(minilm, ("embed", "token_embed"))  # BertModel: what the engine reports as supported


@pytest.fixture(scope="module")
def classifier_app(minilm):
    """Three labels: /classify only (the scoring API needs one label)."""
    return _app(minilm, ("classify", "token_classify"), convert="classify", hf_overrides={"num_labels": 3})


@pytest.fixture(scope="module")
def cross_encoder_app(minilm):
    """One label: /classify and the scoring API."""
    return _app(minilm, ("classify", "token_classify"), convert="classify", hf_overrides={"num_labels": 1})


def _not_found(app, path):
    r = app.post(path, json={"model": "m", "input": "a cat"})
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["type"] == "NotFoundError"
    return error["message"]


@pytest.mark.parametrize("path", ["/classify"])
def test_unserved_endpoint_names_the_problem(minilm_app, path):
    assert _not_found(minilm_app, path) == (
        f"This server's model does not serve {path}, which needs a classification model "
        "(the 'classify' task). It runs the pooling task 'embed' (the model supports 'embed', "
        f"'token_embed'); its pooling endpoints: {EMBED_ENDPOINTS}.")


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v2/embed", "/score", "/v1/score", "/rerank", "/v1/rerank",
                                  "/v2/rerank"])
def test_classifier_unserved_endpoints(classifier_app, path):
    needs = "an embedding model (the 'embed' task)" if "embed" in path else SCORE_NEEDS
    assert _not_found(classifier_app, path) == (
        f"This server's model does not serve {path}, which needs {needs}. It runs the pooling task "
        "'classify' (the model supports 'classify', 'token_classify'); its pooling endpoints: "
        "/pooling, /classify.")


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v2/embed"])
def test_cross_encoder_unserved_endpoints(cross_encoder_app, path):
    assert _not_found(cross_encoder_app, path) == (
        f"This server's model does not serve {path}, which needs an embedding model (the 'embed' task). "
        "It runs the pooling task 'classify' (the model supports 'classify', 'token_classify'); its "
        "pooling endpoints: /pooling, /classify, /score, /v1/score, /rerank, /v1/rerank, /v2/rerank.")


def test_served_endpoints_keep_their_routes(minilm_app, cross_encoder_app):
    """/v1/embeddings and /score are still their routes: a malformed body gets
    its request validation (400), not the unserved-endpoint answer."""
    for app, path in ((minilm_app, "/v1/embeddings"), (cross_encoder_app, "/score")):
        r = app.post(path, content=b'{"model": ', headers={"Content-Type": "application/json"})
        assert r.status_code == 400
        # "JSON decode error" up to revision 8 of 0.32.0; "The request body is not valid JSON" with 0058
        assert "JSON" in r.json()["error"]["message"]


def _serving_pooling(pooling_task, supported_tasks):
    """A ServingPooling with only what its task check reads (no engine)."""
    from vllm.entrypoints.pooling.pooling.serving import ServingPooling

    serving = object.__new__(ServingPooling)
    serving.pooling_task, serving.supported_tasks, serving.io_processors = pooling_task, supported_tasks, {}
    return serving


def _refusal(serving, request) -> Exception:
    from vllm.exceptions import VLLMValidationError

    with pytest.raises((ValueError, VLLMValidationError)) as info:
        serving._verify_pooling_task(request)
    return info.value


def _refused_task(serving, request) -> str:
    """The message ``serving._verify_pooling_task(request)`` refuses the
    request's task with (without a parameter suffix), checked to be raised
    as the release's check raises upstream's own refusal there, of a request
    with ``dimensions`` (the server answers both with a 400): a plain
    ``ValueError`` up to 0.28.0; from 0.29.0 a ``VLLMValidationError``, here
    naming ``parameter="task"``."""
    from vllm.entrypoints.pooling.pooling.protocol import PoolingCompletionRequest
    from vllm.exceptions import VLLMValidationError

    upstreams = _refusal(serving, PoolingCompletionRequest(model="m", input="a cat", dimensions=8))
    assert "dimensions" in str(upstreams)
    error = _refusal(serving, request)
    assert type(error) is type(upstreams)
    if not isinstance(error, VLLMValidationError):
        assert type(error) is ValueError
        return str(error)
    assert error.parameter == "task"
    message, suffix = str(error).rsplit(" ", 1)
    assert suffix == "(parameter=task)"
    return message


def test_pooling_endpoint_task_not_run_names_the_fix():
    from vllm.entrypoints.pooling.pooling.protocol import PoolingCompletionRequest

    serving = _serving_pooling("embed", ("embed", "token_embed"))
    request = PoolingCompletionRequest(model="m", input="a cat", task="token_embed")
    assert _refused_task(serving, request) == (
        "This server runs the pooling task 'embed', not 'token_embed'. The model supports 'token_embed': "
        "serve it for such requests with --pooler-config.task token_embed.")


def test_pooling_endpoint_unsupported_task():
    from vllm.entrypoints.pooling.pooling.protocol import PoolingCompletionRequest

    serving = _serving_pooling("embed", ("embed", "token_embed"))
    request = PoolingCompletionRequest(model="m", input="a cat", task="classify")
    assert _refused_task(serving, request) == (
        "Unsupported task: 'classify'. Supported tasks: ('embed', 'token_embed')")


def test_offline_encode_task_not_run_names_the_fix():
    from vllm.entrypoints.pooling.offline import PoolingOfflineMixin

    llm = object.__new__(PoolingOfflineMixin)
    llm.runner_type, llm.pooling_task, llm.supported_tasks = "pooling", "embed", ("embed", "token_embed")
    llm.pooling_io_processors = {}
    with pytest.raises(ValueError) as info:
        llm._verify_pooling_task("token_embed")
    assert str(info.value) == ("This engine runs the pooling task 'embed', not 'token_embed'. The model "
                               "supports 'token_embed': open the engine for it with "
                               "`pooler_config=PoolerConfig(task=\"token_embed\")`.")
