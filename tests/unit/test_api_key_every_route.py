"""Patch 0056: with an API key, every route of ``vllm serve`` requires it, except
the probes (``/health``, ``/ping``, ``/version``) and, when the operator says so
(``--api-key-exempt-metrics``), ``/metrics``.

The app is the one ``vllm serve`` builds (upstream's ``build_app``, no engine: a
pooling model's config only), for an embedding model and for a cross-encoder,
so that every pooling route is registered. Every route the app registers is
called without the key, with a wrong key and with the right one: a route added
later is covered by the same loop, guarded unless it is on the open list.
Upstream (0.32.0) guarded only ``/v1``, ``/v2``, ``/inference`` and ``/cohere``:
``/pooling``, ``/score``, ``/rerank``, ``/invocations``, ``/tokenize`` and
``/metrics`` answered without a key."""

from __future__ import annotations

import pytest

from scripts.series.lines import get_line

from tests.unit.upstream_names import serve_cli, server_app_builders

pytestmark = pytest.mark.line("0.32.0", "0.34.0")

KEY = "s3cret-key"
OPEN = {"/health", "/ping", "/version"}


def _app(model: str, tasks: tuple, cli: list[str], **engine_args):
    from fastapi.testclient import TestClient

    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    make_arg_parser, build_app = server_app_builders()
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", model, *cli])
    config = EngineArgs(model=model, runner="pooling", **engine_args).create_engine_config()
    return TestClient(build_app(args, tasks, config.model_config), raise_server_exceptions=False)


def _paths(client) -> list[tuple[str, str]]:
    """(method, path) of every route and mount the app registered."""
    from starlette.routing import Mount

    found = []
    for route in client.app.routes:
        if isinstance(route, Mount):
            found.append(("GET", route.path))
            continue
        for method in sorted(getattr(route, "methods", None) or {"GET"}):
            if method == "HEAD":
                continue
            path = route.path.replace("{", "").replace("}", "")  # a path parameter: any value
            found.append((method, path))
    return found


@pytest.fixture(scope="module", params=["embed", "cross-encoder"])
def keyed_app(request, minilm):
    if request.param == "embed":
        return _app(minilm, ("embed", "token_embed"), ["--api-key", KEY])
    return _app(minilm, ("classify", "token_classify"), ["--api-key", KEY],
                convert="classify", hf_overrides={"num_labels": 1})


def test_every_route_but_the_probes_requires_the_key(keyed_app):
    routes = _paths(keyed_app)
    paths = {path for _, path in routes}
    # the routes upstream left open are among those checked
    assert {"/pooling", "/score", "/rerank", "/invocations", "/tokenize", "/detokenize",
            "/metrics", "/docs", "/openapi.json"} <= paths
    for method, path in routes:
        without = keyed_app.request(method, path)
        wrong = keyed_app.request(method, path, headers={"Authorization": "Bearer wrong"})
        if path in OPEN:
            # not refused (/health and /ping answer 500 here: this app has no engine)
            assert without.status_code != 401, (method, path)
            continue
        for response in (without, wrong):
            assert response.status_code == 401, (method, path, response.status_code)
            assert response.headers["www-authenticate"] == "Bearer"
            message = response.json()["error"]["message"]
            assert "Authorization: Bearer <key>" in message, message
        keyed = keyed_app.request(method, path, headers={"Authorization": f"Bearer {KEY}"})
        assert keyed.status_code != 401, (method, path)


def test_the_key_opens_the_guarded_routes(keyed_app):
    """With the key, routes that need no engine answer: the schema and metrics."""
    keyed = {"Authorization": f"Bearer {KEY}"}
    schema = keyed_app.get("/openapi.json", headers=keyed)
    assert schema.status_code == 200
    assert "/pooling" in schema.json()["paths"]
    assert keyed_app.get("/metrics", headers=keyed).status_code == 200


def test_preflight_and_a_trailing_slash_of_a_probe(keyed_app):
    assert keyed_app.get("/version/").status_code != 401
    assert keyed_app.get("/version").json()["version"].startswith(get_line().name)
    # a CORS preflight (Origin and Access-Control-Request-Method) goes to the CORS middleware
    preflight = {"Origin": "https://client.example", "Access-Control-Request-Method": "POST"}
    assert keyed_app.options("/v1/embeddings", headers=preflight).status_code != 401


def test_an_options_request_that_is_no_preflight_needs_the_key(keyed_app):
    # /metrics is a mounted app that answers every method: OPTIONS without the key
    # returned the metrics before
    for path in [path for _, path in _paths(keyed_app) if path not in OPEN]:
        for headers in ({}, {"Origin": "https://client.example"}):
            response = keyed_app.options(path, headers=headers)
            assert response.status_code == 401, (path, headers, response.status_code)
    keyed = keyed_app.options("/metrics", headers={"Authorization": f"Bearer {KEY}"})
    assert keyed.status_code == 200 and "# TYPE" in keyed.text  # the Prometheus text


def test_metrics_open_only_when_exempted(minilm):
    closed = _app(minilm, ("embed",), ["--api-key", KEY])
    assert closed.get("/metrics").status_code == 401
    exempt = _app(minilm, ("embed",), ["--api-key", KEY, "--api-key-exempt-metrics"])
    assert exempt.get("/metrics").status_code == 200
    assert exempt.post("/pooling", json={"input": "x"}).status_code == 401


def test_no_key_no_guard(minilm):
    """Without a key nothing is guarded: the schema and metrics answer."""
    client = _app(minilm, ("embed",), [])
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/metrics").status_code == 200


@pytest.mark.parametrize("cli, env, fragment", [
    (["--api-key-exempt-metrics"], {}, "no key is set: add --api-key"),
    (["--api-key", KEY, "--grpc"], {}, "the --grpc frontend does not check it"),
    ([], {"VLLM_API_KEY": KEY, "VLLM_USE_RUST_FRONTEND": "1"},
     "the VLLM_USE_RUST_FRONTEND=1 frontend does not check it"),
])
def test_settings_the_guard_cannot_keep_are_refused(minilm, monkeypatch, cli, env, fragment):
    make_arg_parser, validate_parsed_serve_args = serve_cli()
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", minilm, *cli])
    with pytest.raises(ValueError, match=fragment.replace("-", r"\-")):
        validate_parsed_serve_args(args)
