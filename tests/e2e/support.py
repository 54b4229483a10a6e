"""Helpers of the e2e tests that drive an engine step by step
(``LLMEngine.add_request`` / ``step``): random token-id prompts, a drain
loop that records how many requests finished in each step, and a time limit
for a call that may hang (``call_within``)."""

from __future__ import annotations

import random
import threading

import pytest


def drain(eng) -> tuple[dict, list[int]]:
    """Step ``eng`` (a ``vllm.v1.engine.llm_engine.LLMEngine``) until idle;
    return the finished outputs by request id and the count finished per step."""
    outs, per_step = {}, []
    while eng.has_unfinished_requests():
        done = [o for o in eng.step() if o.finished]
        per_step.append(len(done))
        outs.update({o.request_id: o for o in done})
    return outs, per_step


def random_prompt(rng: random.Random, n: int) -> list[int]:
    """``n`` token ids drawn from MiniLM's word pieces (1000..28999)."""
    return [rng.randrange(1000, 29000) for _ in range(n)]


def call_within(fn, seconds: float):
    """``fn()``'s result, or pytest.fail when it has not returned after
    ``seconds`` (the call keeps running in a daemon thread; the engine is
    shut down by the fixture)."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the engine did not finish the requests within {seconds} s")
    if "error" in box:
        raise box["error"]
    return box["value"]
