"""Host-side pooling overhead per step (``make bench``, part 3): MRV2's pooling
path against the V1 runner's, on the same synthetic inputs, without a model
forward.

Each step is a batch of ``n`` whole prompts (encoder-only prefill: every
request finishes in the step) with prompt lengths drawn from 8 to 40 tokens
(fixed seed) and random fp32 hidden states of MiniLM's width (384). Both
runners get vLLM's own poolers (``DispatchPooler`` over ``SequencePooler`` /
``TokenPooler`` with the embedding heads, L2 normalisation on) and the same
``PoolingParams``; what is timed is everything each runner does per step
after the forward to pool, except the computed-token bookkeeping (MRV2's
``postprocess_num_computed_tokens``, about 10-15 us on the CPU; V1 keeps its
counts in ``_update_states``), left out on both sides:

- MRV2: ``GPUModelRunner.pool`` of ``vllm/v1/worker/gpu/model_runner.py``
  as MRV2's CPU runner (``vllm/v1/worker/cpu/model_runner.py``) runs it
  (``PoolingRunner.pool``: pooling metadata from CPU-side state, the pooler,
  late-interaction post-processing; then ``ModelRunnerOutput`` with the
  output handed over by ``cpu_pooling_output``);
- V1: ``GPUModelRunner._pool`` of ``vllm/v1/worker/gpu_model_runner.py``
  (``InputBatch.get_pooling_metadata``, the cursor, the pooler, the finished
  mask, late-interaction post-processing, ``ModelRunnerOutput`` and the copy
  to the host) on a real V1 ``InputBatch`` holding the same requests.

Both are called as the unbound methods of the real runner classes on a
stand-in ``self`` that carries only what they read; the CPU worker's torch
patches (``vllm.v1.worker.cpu.shm``: no-op events and streams) are applied
first, as in an engine's worker. Variants: ``embed-mean``, ``embed-cls``,
``embed-last`` (sequence pooling), ``token_embed`` (all tokens),
``li-query`` (ColBERT queries: token embeddings projected to 128 and cached)
and ``li-doc`` (ColBERT documents scored by MaxSim against one cached query).

Also timed, as a reference: the pooler alone on prebuilt metadata (the
tensor work both runners share). Repetitions of the two runners are
interleaved; figures are medians in microseconds per step. The outputs of
the two runners are checked to be equal before timing.

Run it in a process of its own (it patches torch as a CPU worker does):

    python -m scripts.bench.pool_overhead [--sizes 1,4,16,64,256] [--variants ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np

HIDDEN = 384  # all-MiniLM-L6-v2's hidden size
COLBERT_DIM = 128
QUERY_TOKENS = 16
VARIANTS = ("embed-mean", "embed-cls", "embed-last", "token_embed", "li-query", "li-doc")
BATCH_SIZES = (1, 4, 16, 64, 256)
PROMPT_LENS = (8, 40)  # inclusive range of the synthetic prompt lengths, tokens
VOCAB = 30522


@contextmanager
def _stand_in_vllm_config():
    """``get_current_vllm_config()`` for pooler construction: whole prompts
    (no chunked prefill), fp32 head."""
    from vllm.config.vllm import set_current_vllm_config

    cfg = SimpleNamespace(scheduler_config=SimpleNamespace(enable_chunked_prefill=False),
                          model_config=SimpleNamespace(head_dtype=None))
    with set_current_vllm_config(cfg):  # type: ignore[arg-type]
        yield


def make_pooler(variant: str):
    """vLLM's pooler for ``variant``: a ``DispatchPooler`` serving one task,
    and that task."""
    import torch

    from vllm.model_executor.layers.pooler.activations import PoolerNormalize
    from vllm.model_executor.layers.pooler.seqwise.heads import EmbeddingPoolerHead
    from vllm.model_executor.layers.pooler.seqwise.methods import get_seq_pooling_method
    from vllm.model_executor.layers.pooler.seqwise.poolers import SequencePooler
    from vllm.model_executor.layers.pooler.special import DispatchPooler
    from vllm.model_executor.layers.pooler.tokwise.heads import TokenEmbeddingPoolerHead
    from vllm.model_executor.layers.pooler.tokwise.methods import AllPool
    from vllm.model_executor.layers.pooler.tokwise.poolers import TokenPooler

    if variant.startswith("embed-"):
        method = get_seq_pooling_method(variant.split("-")[1].upper())
        head = EmbeddingPoolerHead(head_dtype=torch.float32, activation=PoolerNormalize())
        return DispatchPooler({"embed": SequencePooler(pooling=method, head=head)}), "embed"
    projector = None
    if variant.startswith("li-"):
        torch.manual_seed(0)
        projector = torch.nn.Linear(HIDDEN, COLBERT_DIM, bias=False)
    with _stand_in_vllm_config():
        pooling = AllPool()
    head = TokenEmbeddingPoolerHead(head_dtype=torch.float32, projector=projector,
                                    activation=PoolerNormalize())
    return DispatchPooler({"token_embed": TokenPooler(pooling=pooling, head=head)}), "token_embed"


def _params(variant: str, task: str, i: int):
    from vllm.pooling_params import PoolingParams
    from vllm.v1.pool.late_interaction import (build_late_interaction_doc_params,
                                               build_late_interaction_query_params)

    if variant == "li-query":
        return PoolingParams(task=task, late_interaction_params=build_late_interaction_query_params(f"q{i}", 1))
    if variant == "li-doc":
        return PoolingParams(task=task, late_interaction_params=build_late_interaction_doc_params("q"))
    return PoolingParams(task=task)


def _model(pooler):
    from scripts.validation.stand_ins import StandInPoolingModel

    return StandInPoolingModel(pooler=pooler)


def _seed_query(li_runner) -> None:
    """Cache one ColBERT query "q" for ``li-doc`` with uses that never run out."""
    import torch

    gen = torch.Generator().manual_seed(1)
    q = torch.nn.functional.normalize(torch.randn(QUERY_TOKENS, COLBERT_DIM, generator=gen), dim=-1)
    li_runner._query_cache["q"] = q
    li_runner._query_uses["q"] = 10**12


def make_step(variant: str, n: int, max_reqs: int, seed: int = 0) -> dict:
    """Inputs of one step of ``n`` requests, shared by both runners: prompt
    lengths, token ids, ``PoolingParams`` per runner (a pooler's updates
    mutate them), hidden states [num_tokens, 384] fp32."""
    import torch

    rng = np.random.default_rng(seed + n)
    lens = rng.integers(PROMPT_LENS[0], PROMPT_LENS[1] + 1, size=n).astype(np.int32)
    gen = torch.Generator().manual_seed(seed + n)
    return {"variant": variant, "n": n, "max_reqs": max_reqs, "lens": lens,
            "token_ids": [rng.integers(1000, VOCAB, size=int(k)).tolist() for k in lens],
            "hidden": torch.randn(int(lens.sum()), HIDDEN, generator=gen)}


def mrv2_step(step: dict):
    """A callable running one MRV2 pooling step on ``step``; returns the
    ``ModelRunnerOutput`` (pooler outputs on the host)."""
    import torch

    # MRV2's CPU runner (GPUModelRunner with the CPU's output hand-off): what runs here.
    import vllm.v1.worker.gpu.model_runner as gpu_model_runner
    from vllm.v1.worker.cpu.model_runner import CPUModelRunner, cpu_pooling_output
    from vllm.v1.worker.gpu.pool.pooling_runner import PoolingRunner

    pooler, task = make_pooler(step["variant"])
    n, lens, max_reqs = step["n"], step["lens"], step["max_reqs"]
    model_config = SimpleNamespace(attn_type="encoder_only", pooler_config=SimpleNamespace(task=task),
                                   get_vocab_size=lambda: VOCAB, get_pooling_task=lambda tasks: task)
    vllm_config = SimpleNamespace(model_config=model_config,
                                  scheduler_config=SimpleNamespace(max_num_seqs=max_reqs))
    runner = PoolingRunner(_model(pooler), vllm_config)  # type: ignore[arg-type]
    # slots as MRV2's RequestState hands them out (free_indices.pop())
    slots = np.arange(max_reqs - 1, max_reqs - 1 - n, -1, dtype=np.int32)
    prompt_len = np.zeros(max_reqs, dtype=np.int32)
    req_ids = [f"req-{i}" for i in range(n)]
    for i, slot in enumerate(slots):
        runner.add_request(req_ids[i], int(slot), _params(step["variant"], task, i), step["token_ids"][i])
        prompt_len[slot] = lens[i]
    if step["variant"] == "li-doc":
        _seed_query(runner.late_interaction_runner)
    qsl = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    input_batch = SimpleNamespace(
        req_ids=req_ids, num_reqs=n, idx_mapping_np=slots, idx_mapping=torch.from_numpy(slots),
        num_scheduled_tokens=lens.copy(), num_tokens=int(qsl[-1]),
        query_start_loc=torch.from_numpy(qsl), query_start_loc_np=qsl,
        seq_lens_cpu_upper_bound=torch.from_numpy(lens.copy()))
    req_states = SimpleNamespace(prompt_len=SimpleNamespace(np=prompt_len))
    fake = SimpleNamespace(
        execute_model_state=None, is_last_pp_rank=True, pooling_runner=runner, req_states=req_states,
        kv_connector=SimpleNamespace(post_forward=lambda finished: None),
        main_stream=torch.cuda.current_stream(), output_copy_stream=torch.cuda.Stream(),
        postprocess_num_computed_tokens=lambda batch: None,  # device-side, not pooling
        eplb=SimpleNamespace(step=lambda **kwargs: None))
    # the CPU runner's hand-off, put in place of AsyncPoolingOutput as the CPU runner does
    gpu_model_runner.AsyncPoolingOutput = cpu_pooling_output
    hidden = step["hidden"]

    def run():
        fake.execute_model_state = SimpleNamespace(input_batch=input_batch, hidden_states=hidden,
                                                   finished_req_ids=set())
        output = CPUModelRunner.pool(fake)
        return output.get_output() if hasattr(output, "get_output") else output

    return run


def v1_step(step: dict):
    """A callable running one V1 pooling step (``GPUModelRunner._pool``) on
    ``step``; returns the ``ModelRunnerOutput``."""
    import torch

    from vllm.v1.pool.late_interaction_runner import LateInteractionRunner
    from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.utils import CpuGpuBuffer

    pooler, task = make_pooler(step["variant"])
    n, lens, max_reqs = step["n"], step["lens"], step["max_reqs"]
    input_batch = InputBatch(max_num_reqs=max_reqs, max_model_len=512, max_num_batched_tokens=max_reqs * 512,
                             device=torch.device("cpu"), vocab_size=VOCAB, block_sizes=[16],
                             kernel_block_sizes=[16], max_num_blocks_per_req=[32], is_pooling_model=True)
    li = LateInteractionRunner()
    for i in range(n):
        params = _params(step["variant"], task, i)
        pooler.get_pooling_updates(task).apply(params)  # as V1's _update_states
        req_id = f"req-{i}"
        input_batch.add_request(CachedRequestState(
            req_id=req_id, prompt_token_ids=step["token_ids"][i], mm_features=[], sampling_params=None,
            generator=None, block_ids=([],), num_computed_tokens=0, output_token_ids=[],
            pooling_params=params))
        li.register_request(req_id, params)
    input_batch.refresh_metadata()
    if step["variant"] == "li-doc":
        _seed_query(li)
    seq_lens = torch.zeros(max_reqs, dtype=torch.int32)
    seq_lens[:n] = torch.from_numpy(lens)
    qsl = CpuGpuBuffer(max_reqs + 1, dtype=torch.int32, device=torch.device("cpu"), pin_memory=False)
    qsl.np[: n + 1] = np.concatenate([[0], np.cumsum(lens)])
    qsl.copy_to_gpu(n + 1)
    fake = SimpleNamespace(input_batch=input_batch, optimistic_seq_lens_cpu=seq_lens, query_start_loc=qsl,
                           model=_model(pooler), late_interaction_runner=li,
                           _sync_device=lambda: None)  # the CPU runner's is a no-op too
    hidden, num_tokens, scheduled = step["hidden"], int(lens.sum()), lens.copy()

    def run():
        with torch.inference_mode():  # as V1's execute_model
            return GPUModelRunner._pool(fake, hidden, num_tokens, scheduled, None)

    return run


def pooler_step(step: dict):
    """A callable running only the pooler on prebuilt metadata (the tensor
    work both runners share)."""
    import torch

    from vllm.v1.pool.metadata import PoolingMetadata, PoolingStates

    pooler, task = make_pooler(step["variant"])
    n, lens = step["n"], step["lens"]
    params = [_params(step["variant"], task, i) for i in range(n)]
    for p in params:
        pooler.get_pooling_updates(task).apply(p)
    meta = PoolingMetadata(prompt_lens=torch.from_numpy(lens.copy()), prompt_token_ids=None,
                           prompt_token_ids_cpu=None, pooling_params=params,
                           pooling_states=[PoolingStates() for _ in range(n)])
    meta.build_pooling_cursor(lens.copy(), torch.from_numpy(lens.copy()), device=torch.device("cpu"))
    hidden = step["hidden"]

    def run():
        with torch.inference_mode():
            return pooler(hidden_states=hidden, pooling_metadata=meta)

    return run


def _outputs(model_runner_output) -> list:
    return [None if o is None else o.float() for o in model_runner_output.pooler_output]


def check_same_outputs(a, b) -> None:
    """Raise ``AssertionError`` unless two ``ModelRunnerOutput``s carry the
    same pooler outputs (same request order, shapes, values within 1e-5)."""
    import torch

    oa, ob = _outputs(a), _outputs(b)
    assert a.req_ids == b.req_ids, (a.req_ids, b.req_ids)
    assert len(oa) == len(ob)
    for x, y in zip(oa, ob):
        assert (x is None) == (y is None)
        if x is not None:
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


def interleaved_us(calls: dict, budget_s: float, min_iters: int, max_iters: int) -> dict[str, list[float]]:
    """Time each named zero-argument callable in turn (the order rotating each
    round) after 3 warm-up calls; rounds until ``budget_s`` seconds are spent,
    at least ``min_iters`` and at most ``max_iters``. Microseconds per call."""
    names = list(calls)
    for _ in range(3):
        for fn in calls.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in names}
    start = time.perf_counter()
    rounds = 0
    while rounds < max_iters and (rounds < min_iters or time.perf_counter() - start < budget_s):
        order = names[rounds % len(names):] + names[: rounds % len(names)]
        for name in order:
            t0 = time.perf_counter()
            calls[name]()
            times[name].append((time.perf_counter() - t0) * 1e6)
        rounds += 1
    return times


def measure(variants=VARIANTS, sizes=BATCH_SIZES, budget_s: float = 1.0, min_iters: int = 20,
            max_iters: int = 2000, progress=None) -> dict:
    """Run the micro-benchmark. Returns ``{"rows": [...], ...}`` with one row
    per (variant, requests per step): median microseconds per step for
    ``mrv2``, ``v1`` and ``pooler`` (the pooler alone), ``ratio_mrv2_v1``,
    the iteration count and the tokens per step. ``progress``: a callable
    taking a short label, called before each row."""
    import torch

    import vllm.v1.worker.cpu.shm  # noqa: F401  (the CPU worker's torch patches)

    max_reqs = max(sizes)
    rows = []
    for variant in variants:
        for n in sizes:
            if progress is not None:
                progress(f"{variant} x{n}")
            step = make_step(variant, n, max_reqs)
            calls = {"mrv2": mrv2_step(step), "v1": v1_step(step), "pooler": pooler_step(step)}
            check_same_outputs(calls["mrv2"](), calls["v1"]())
            times = interleaved_us(calls, budget_s, min_iters, max_iters)
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append({"variant": variant, "requests": n, "tokens": int(step["lens"].sum()),
                         "iterations": len(times["mrv2"]),
                         "mrv2_us": med["mrv2"], "v1_us": med["v1"], "pooler_us": med["pooler"],
                         "mrv2_p25_us": float(np.percentile(times["mrv2"], 25)),
                         "mrv2_p75_us": float(np.percentile(times["mrv2"], 75)),
                         "v1_p25_us": float(np.percentile(times["v1"], 25)),
                         "v1_p75_us": float(np.percentile(times["v1"], 75)),
                         "ratio_mrv2_v1": med["mrv2"] / med["v1"]})
    return {"unit": "microseconds per step (median)", "torch_threads": torch.get_num_threads(),
            "hidden_size": HIDDEN, "prompt_lens": list(PROMPT_LENS), "max_num_reqs": max_reqs,
            "rows": rows}


def main(argv=None) -> int:
    """Command line: run ``measure`` and print or write (``--json``) its result."""
    parser = argparse.ArgumentParser(prog="python -m scripts.bench.pool_overhead", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, BATCH_SIZES)), help="requests per step")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of timing per row (both runners)")
    parser.add_argument("--min-iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", default=None, help="write the result here")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure([v for v in args.variants.split(",") if v], [int(s) for s in args.sizes.split(",")],
                     budget_s=args.budget, min_iters=args.min_iters,
                     progress=lambda label: print(f"  overhead {label}", file=sys.stderr, flush=True))
    text = json.dumps(result, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
