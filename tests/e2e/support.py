"""Helpers of the e2e tests that drive an engine step by step
(``LLMEngine.add_request`` / ``step``): random token-id prompts and a drain
loop that records how many requests finished in each step."""

from __future__ import annotations

import random


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
