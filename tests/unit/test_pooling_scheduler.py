"""The scheduler and KV-cache manager with pooling requests (patch 0020).

A pooling request produces its pooler output and no sampled token, so the
scheduler must not keep room for one. Before 0020 a pooling prompt of exactly
``max_model_len`` tokens, chunked, was scheduled forever: the running loop
capped its new tokens at ``max_model_len - computed - 1`` (the last chunk got
15 of 16 tokens, then 0 every step). The scheduler here is upstream's, built
from a real ``VllmConfig`` (tiny Qwen3 embedder, ``max_model_len=64``,
``max_num_batched_tokens=16``) and a one-group KV-cache config; a stand-in
worker answers each step with a pooler output for the requests whose prompt
is complete, as both runners do. Only upstream names are used (``Scheduler``,
``AsyncScheduler``, ``Request``, ``ModelRunnerOutput``).
"""

from __future__ import annotations

from collections import deque

import pytest
import torch

from vllm.pooling_params import PoolingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from tests.unit.upstream_names import model_runner_output

MAX_MODEL_LEN = 64
BUDGET = 16
BLOCK = 16
MAX_STEPS = 40  # a finished request needs 4; more means it was never finished


def make_scheduler(real_config, model, *, async_scheduling: bool, prefix_caching: bool):
    config = real_config(model, "pooling", max_model_len=MAX_MODEL_LEN,
                         max_num_batched_tokens=BUDGET, enable_chunked_prefill=True,
                         enable_prefix_caching=prefix_caching, block_size=BLOCK,
                         async_scheduling=async_scheduling)
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=64, dtype=torch.float32)
    config.cache_config.num_gpu_blocks = 32  # as the engine core sets it after profiling
    kv_cache_config = KVCacheConfig(num_blocks=32, kv_cache_tensors=[],
                                    kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    cls = AsyncScheduler if async_scheduling else Scheduler
    scheduler = cls(vllm_config=config, kv_cache_config=kv_cache_config,
                    structured_output_manager=StructuredOutputManager(config), block_size=BLOCK)
    assert type(scheduler) is cls
    return scheduler, config


def block_hasher(config):
    """The engine core's request block hasher (None without prefix caching);
    made once per scheduler, as the engine core does (the seed hash is
    random per call)."""
    if not config.cache_config.enable_prefix_caching:
        return None
    hash_fn = get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return get_request_block_hasher(BLOCK, hash_fn)


def pooling_request(config, req_id: str, num_tokens: int, first_token: int = 1000,
                    hasher=None) -> Request:
    params = PoolingParams(task="embed")
    params.verify(config.model_config)
    return Request(req_id, list(range(first_token, first_token + num_tokens)), None, params,
                   block_hasher=hasher)


def worker_output(scheduler, scheduler_output) -> ModelRunnerOutput:
    """What a runner returns for a step: a pooler output for each request
    whose whole prompt has been computed, None for unfinished chunks."""
    req_ids = list(scheduler_output.num_scheduled_tokens)
    pooled = []
    for req_id in req_ids:
        request = scheduler.requests[req_id]
        done = request.num_computed_tokens >= request.num_prompt_tokens
        pooled.append(torch.ones(4) if done else None)
    return model_runner_output(req_ids, pooler_output=pooled)


def run_until_finished(scheduler, request, depth: int) -> list[int]:
    """Drive the scheduler like the engine core: ``depth`` steps in flight
    (1: synchronous, 2: async scheduling). Returns the tokens scheduled for
    ``request`` at each step; raises AssertionError when it is not finished
    after MAX_STEPS steps."""
    scheduler.add_request(request)
    in_flight: deque = deque()
    scheduled = []
    for _ in range(MAX_STEPS):
        out = scheduler.schedule()
        n = out.num_scheduled_tokens.get(request.request_id)
        if n:
            scheduled.append(n)
        in_flight.append((out, worker_output(scheduler, out)))
        while len(in_flight) >= depth or (in_flight and not out.num_scheduled_tokens):
            step, result = in_flight.popleft()
            scheduler.update_from_output(step, result)
        if request.is_finished():
            return scheduled
    raise AssertionError(f"request of {request.num_prompt_tokens} tokens not finished "
                         f"after {MAX_STEPS} steps; scheduled {scheduled}")


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("prefix_caching", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_pooling_prompt_of_max_model_len_finishes_when_chunked(real_config, tiny_qwen3,
                                                                async_scheduling, prefix_caching):
    scheduler, config = make_scheduler(real_config, tiny_qwen3, async_scheduling=async_scheduling,
                                       prefix_caching=prefix_caching)
    depth = 2 if async_scheduling else 1
    hasher = block_hasher(config)
    first = pooling_request(config, "first", MAX_MODEL_LEN, hasher=hasher)
    assert run_until_finished(scheduler, first, depth) == [BUDGET] * 4
    if prefix_caching:
        # The same prompt again: blocks up to the last full one before the
        # final token come from the cache, the last block is computed.
        again = pooling_request(config, "again", MAX_MODEL_LEN, hasher=hasher)
        assert run_until_finished(scheduler, again, depth) == [BLOCK]
    # Shorter prompts finished before the fix too, and still do (other
    # tokens: no prefix in the cache).
    short = pooling_request(config, "short", MAX_MODEL_LEN - 1, first_token=5000, hasher=hasher)
    assert run_until_finished(scheduler, short, depth) == [16, 16, 16, 15]


def test_async_scheduling_keeps_no_sampled_token_placeholder_for_pooling(real_config, tiny_qwen3):
    """With async scheduling a request whose prompt is complete gets a
    placeholder for each token it will sample before the step's output
    arrives; a pooling request samples none, so it gets none."""
    scheduler, config = make_scheduler(real_config, tiny_qwen3, async_scheduling=True,
                                       prefix_caching=False)
    short = pooling_request(config, "short", BUDGET // 2)
    chunked = pooling_request(config, "chunked", BUDGET, first_token=5000)
    scheduler.add_request(short)
    scheduler.add_request(chunked)
    out = scheduler.schedule()
    # "short" is complete after this step, "chunked" got the rest of the budget.
    assert out.num_scheduled_tokens == {"short": BUDGET // 2, "chunked": BUDGET // 2}
    assert (short.num_output_placeholders, chunked.num_output_placeholders) == (0, 0)
