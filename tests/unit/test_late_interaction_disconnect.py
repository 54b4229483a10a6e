"""Patch 0033: once a late-interaction score has submitted its queries (the
workers cache them with one use per document), a cancelled handler (the
client went away) no longer stops it half-way: both stages run to the end,
so the documents release their queries; only the response is dropped. A
cancellation before that still cancels. Through ``ServingScores``'s stages
(upstream's names), with stand-ins for the engine work."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

# Stand-ins for the base's serving stages: a test of the 0.26.0 line (0033, dropped onto 0.32.0,
# which carries it); a client that goes away from a real server: tests/e2e/test_server.py.
pytestmark = pytest.mark.line("0.26.0")


def serving_with_stages(events: list, started: asyncio.Event, pre_delay: float = 0.0):
    from vllm.entrypoints.pooling.scoring.serving import ServingScores

    serving = object.__new__(ServingScores)  # no engine: the stages are stand-ins
    serving.io_processor = None

    async def init_ctx(io_processor, *args, **kwargs):
        return SimpleNamespace()

    async def preprocessing(io_processor, ctx):
        started.set()
        await asyncio.sleep(pre_delay)

    async def encode_queries(ctx):
        started.set()
        await asyncio.sleep(0.05)
        events.append("queries cached")

    async def encode_docs(ctx):
        await asyncio.sleep(0.05)
        events.append("documents scored")

    async def postprocessing(io_processor, ctx):
        events.append("response")
        return "response"

    serving._init_ctx = init_ctx
    serving._preprocessing_async = preprocessing
    serving._flash_late_interaction_encode_queries = encode_queries
    serving._flash_late_interaction_encode_docs = encode_docs
    serving._postprocessing_async = postprocessing
    return serving


def run(pre_delay: float) -> list:
    async def scenario():
        events, started = [], asyncio.Event()
        serving = serving_with_stages(events, started, pre_delay)
        handler = asyncio.ensure_future(serving.flash_late_interaction(None))
        # bounded: a serving whose stages are not these never starts them
        await asyncio.wait_for(started.wait(), 30)
        await asyncio.sleep(0.01 if pre_delay == 0 else 0)
        handler.cancel()  # what with_cancellation does when the client disconnects
        with pytest.raises(asyncio.CancelledError):
            await handler
        await asyncio.sleep(0.3)
        return events

    return asyncio.run(scenario())


def test_cancel_after_queries_submitted_still_scores_the_documents():
    assert run(pre_delay=0.0) == ["queries cached", "documents scored"]


def test_cancel_before_queries_submitted_cancels():
    assert run(pre_delay=0.2) == []


def test_uncancelled_request_answers():
    async def scenario():
        events = []
        serving = serving_with_stages(events, asyncio.Event())
        return await asyncio.wait_for(serving.flash_late_interaction(None), 30), events

    assert asyncio.run(scenario()) == ("response", ["queries cached", "documents scored", "response"])
