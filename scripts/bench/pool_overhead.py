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
  output handed over by the CPU runner's hand-off,
  ``CPUModelRunner.async_pooling_output_cls``);
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
from pathlib import Path

import numpy as np

from scripts.bench.pool_steps import HIDDEN, PROMPT_LENS, make_step, mrv2_step, pooler_step, v1_step
from scripts.common.reports import write_reports

VARIANTS = ("embed-mean", "embed-cls", "embed-last", "token_embed", "li-query", "li-doc")
BATCH_SIZES = (1, 4, 16, 64, 256)


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
    the iteration count and the tokens per step; the ``v1`` figures are None
    where the base has no V1 (from 0.34.0: ``base_runners``). ``progress``: a
    callable taking a short label, called before each row."""
    import torch

    import vllm.v1.worker.cpu.shm  # noqa: F401  (the CPU worker's torch patches)
    from scripts.validation.engine import base_runners

    has_v1 = "V1" in base_runners()

    max_reqs = max(sizes)
    rows = []
    for variant in variants:
        for n in sizes:
            if progress is not None:
                progress(f"{variant} x{n}")
            step = make_step(variant, n, max_reqs)
            calls = {"mrv2": mrv2_step(step), "pooler": pooler_step(step)}
            if has_v1:
                calls["v1"] = v1_step(step)
                check_same_outputs(calls["mrv2"](), calls["v1"]())
            times = interleaved_us(calls, budget_s, min_iters, max_iters)
            med = {k: statistics.median(v) for k, v in times.items()}
            v1 = {"v1_us": med["v1"], "v1_p25_us": float(np.percentile(times["v1"], 25)),
                  "v1_p75_us": float(np.percentile(times["v1"], 75)),
                  "ratio_mrv2_v1": med["mrv2"] / med["v1"]} if has_v1 else {
                "v1_us": None, "v1_p25_us": None, "v1_p75_us": None, "ratio_mrv2_v1": None}
            rows.append({"variant": variant, "requests": n, "tokens": int(step["lens"].sum()),
                         "iterations": len(times["mrv2"]),
                         "mrv2_us": med["mrv2"], "pooler_us": med["pooler"],
                         "mrv2_p25_us": float(np.percentile(times["mrv2"], 25)),
                         "mrv2_p75_us": float(np.percentile(times["mrv2"], 75)), **v1})
    return {"unit": "microseconds per step (median)", "torch_threads": torch.get_num_threads(),
            "hidden_size": HIDDEN, "prompt_lens": list(PROMPT_LENS), "max_num_reqs": max_reqs,
            "rows": rows}


def main(argv=None) -> int:
    """Command line: run ``measure`` and print or write (``--json``) its result."""
    parser = argparse.ArgumentParser(prog="python -m scripts.bench.pool_overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, BATCH_SIZES)), help="requests per step")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of timing per row (both runners)")
    parser.add_argument("--min-iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", default=None, help="write the result to this .json file (default: print it)")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure([v for v in args.variants.split(",") if v], [int(s) for s in args.sizes.split(",")],
                     budget_s=args.budget, min_iters=args.min_iters,
                     progress=lambda label: print(f"  overhead {label}", file=sys.stderr, flush=True))
    if args.json:
        path = Path(args.json)
        write_reports({path.name: result}, path.parent)
    else:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
