"""Issue 28, item 1 (patch 0043): the key a late-interaction query is cached
under on the workers is made by the server, never from the request id a
client sets (``X-Request-Id``). Two concurrent /score requests carrying the
same header used to build the same keys: the second query replaced the
first in the worker's cache, one client's documents were scored against the
other client's query and the other's documents missed theirs (a 500, then a
dead engine core).

Through ``ServingScores.flash_late_interaction`` (upstream's stages) with
the engine stood in for: ``_prepare_generators`` records the
late-interaction parameters each stage sends; the two requests run
interleaved, each with one query and three documents.

The stand-ins replace the base's serving stages by name, so this is a test
of the 0.26.0 line (upstream makes the keys from 0.30.0, where 0043 was
dropped); the behaviour, two clients with one ``X-Request-Id`` against a
real server, is ``check_shared_request_id`` in tests/e2e/test_server.py on
every line."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.upstream_names import serve_context

SHARED = "score-the-same-id"  # what both clients' X-Request-Id header makes of ctx.request_id


def serving_recording(sent: list):
    from vllm import PoolingParams
    from vllm.entrypoints.pooling.scoring.serving import ServingScores

    serving = object.__new__(ServingScores)  # no engine: the engine work is stood in for
    serving.io_processor = None

    async def init_ctx(io_processor, request, raw_request=None):
        return serve_context(request, "colbert", SHARED, PoolingParams(task="token_embed"))

    async def preprocessing(io_processor, ctx):
        ctx.n_queries = 1
        ctx.engine_inputs = [{"type": "token", "prompt_token_ids": [101, i, 102]} for i in range(4)]

    async def prepare_generators(ctx):
        for request_id, params in zip(ctx.prompt_request_ids, ctx.pooling_params, strict=True):
            lip = params.late_interaction_params
            sent.append((ctx.request, request_id, lip.mode, lip.query_key))

    async def collect_batch(ctx):
        await asyncio.sleep(0.01)  # the other request's stage runs meanwhile
        ctx.final_res_batch = []

    async def postprocessing(io_processor, ctx):
        return ctx.request

    serving._init_ctx = init_ctx
    serving._preprocessing_async = preprocessing
    serving._prepare_generators = prepare_generators
    serving._collect_batch = collect_batch
    serving._postprocessing_async = postprocessing
    return serving


@pytest.mark.line("0.26.0")
def test_requests_sharing_a_request_id_cache_their_queries_under_their_own_keys():
    sent: list = []

    async def scenario():
        serving = serving_recording(sent)
        return await asyncio.gather(serving.flash_late_interaction("client A"),
                                    serving.flash_late_interaction("client B"))

    assert asyncio.run(scenario()) == ["client A", "client B"]
    keys = {}
    for client in ("client A", "client B"):
        mine = [(mode, key) for who, _, mode, key in sent if who == client]
        assert [mode for mode, _ in mine] == ["cache_query"] + ["score_doc"] * 3
        (query_key,) = {key for _, key in mine}  # its documents read its own query
        keys[client] = query_key
    assert keys["client A"] != keys["client B"]
