"""vLLM's engine configurations the benchmarks measure (``ENGINES``), opened,
probed and closed through one context manager (``engine``), and as a
measured system in a process of its own (``EngineSystem``, for
``scripts.bench.host``); sentence-transformers on the same weights in the
profiler's process (``st_model``); the environment of the process that
measures them (``bench_environ``).

Engines open through ``scripts.validation.engine.vllm_runner`` with
``check=False``: where the tests assert the runner, the benchmarks measure a
configuration that ran another runner all the same and mark it
(``runner_as_requested``, ``*`` in the table): that is what a user of the
configuration gets.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager

from scripts.common.environ import environ
from scripts.common.paths import BUILD

# Encoder-only models have no KV cache; a small reservation keeps several
# engines open at once well inside the machine's memory (docs/base-and-recipe.md: <= 0.3).
GPU_MEMORY_UTILIZATION = 0.1
# runner: scripts.validation.engine.vllm_runner's choice; triton_interpret: TRITON_INTERPRET=1
# in the engine's processes; want: the runner its worker should build.
ENGINES = {
    "v1": {"runner": "v1", "triton_interpret": False, "want": "V1"},
    "mrv2-interpreter": {"runner": "v2", "triton_interpret": True, "want": "MRV2"},
    "mrv2": {"runner": "default", "triton_interpret": False, "want": "MRV2"},
}
ST = "sentence-transformers"
# The tiny random HF_ColBERT checkpoint of the colbert and serve sections (made on first use).
TINY_COLBERT = BUILD / "models" / "tiny-hf-colbert"


def bench_environ() -> AbstractContextManager[None]:
    """The environment of a benchmark process, for the block: models from
    local files (``HF_HUB_OFFLINE`` default 1), vLLM's warnings only
    (``VLLM_LOGGING_LEVEL`` default WARNING), and ``TRITON_INTERPRET=1``:
    vLLM decides ``HAS_TRITON`` when it is imported, so with the interpreter on
    in this process the MRV2-interpreter engines validate here; each engine's
    processes get their own ``TRITON_INTERPRET`` (``engine``). Enter it before
    vLLM is imported."""
    return environ(HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"),
                   VLLM_LOGGING_LEVEL=os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"),
                   TRITON_INTERPRET="1")


def worker_probe(worker) -> dict:
    """Runs in an engine's worker: the runner it built and how it runs —
    runner class, ``TRITON_INTERPRET`` in its environment, vLLM's
    ``HAS_TRITON`` and ``TRITON_VIA_INTERPRETER``, whether MRV2's native input
    preparation (patch 0008) is active (None without that patch), torch
    threads."""
    import torch

    from scripts.validation.engine import input_preparation_kind, runner_class
    from vllm.triton_utils import importing

    try:
        # the 0.26.0 line's runner class attributes or the 0.32.0 line's dispatcher overrides
        native = input_preparation_kind(worker) == "native"
    except ImportError:
        native = None  # a series without patch 0008
    return {"runner_class": runner_class(worker), "triton_interpret_env": os.environ.get("TRITON_INTERPRET"),
            "has_triton": bool(importing.HAS_TRITON),
            "triton_via_interpreter": bool(getattr(importing, "TRITON_VIA_INTERPRETER", False)),
            "native_input_prep": native, "torch_threads": torch.get_num_threads()}


@contextmanager
def engine(name: str, model, **kwargs) -> Iterator[tuple[object, dict]]:
    """Engine configuration ``name`` (an ``ENGINES`` key) on ``model`` for the
    block, closed after it (``close_llm``), also when the block raises.

    Opens with ``vllm_runner(check=False)`` (fp32, pooling runner,
    ``GPU_MEMORY_UTILIZATION`` unless ``kwargs`` say otherwise; ``kwargs`` go
    to ``LLM``) with the configuration's ``TRITON_INTERPRET`` in the
    environment its processes inherit: the runner is recorded, not asserted. Yields the ``LLM`` and what its worker reports (``worker_probe``)
    plus ``runner`` ("MRV2"/"V1", ``runner_in_use``), ``requested``,
    ``open_seconds``, ``runner_env``, ``triton_interpret_requested`` and
    ``runner_as_requested``: the runner asked for ran and, for MRV2, with the
    input preparation asked for (interpreter or not). Raises ``KeyError`` for
    an unknown ``name`` and what ``LLM`` raises."""
    from scripts.validation.engine import runner_in_use, vllm_runner

    spec = ENGINES[name]
    kwargs.setdefault("gpu_memory_utilization", GPU_MEMORY_UTILIZATION)
    # the engine's processes inherit TRITON_INTERPRET when they start; it holds for the block
    with environ(TRITON_INTERPRET="1" if spec["triton_interpret"] else None):
        start = time.perf_counter()
        with vllm_runner(model, spec["runner"], check=False, **kwargs) as llm:
            opened = time.perf_counter() - start
            (probe,) = {json.dumps(p, sort_keys=True) for p in llm.collective_rpc(worker_probe)}
            info = json.loads(probe)
            info.update(runner=runner_in_use(llm), requested=spec["want"], open_seconds=opened,
                        triton_interpret_requested=spec["triton_interpret"], runner_env=spec["runner"])
            info["runner_as_requested"] = info["runner"] == spec["want"] and (
                spec["want"] != "MRV2" or info["triton_via_interpreter"] == spec["triton_interpret"])
            yield llm, info


def st_model(model_dir, threads: int | None):
    """A ``SentenceTransformer`` for ``model_dir`` on the CPU (fp32), with
    this process's torch threads set to ``threads`` when given: the engines'
    worker thread count, for the same compute budget per forward."""
    import torch
    from sentence_transformers import SentenceTransformer

    if threads:
        torch.set_num_threads(threads)
    return SentenceTransformer(str(model_dir), device="cpu")


class EngineSystem:
    """Engine configuration ``name`` (an ``ENGINES`` key) as a measured system
    of its own (``scripts.bench.host``): the ``LLM`` front end lives in the
    host process, so vLLM's front end, engine core and worker are all this
    system's processes. Opened with ``engine`` (``llm_kwargs`` go to ``LLM``);
    the host's environment carries the configuration's
    ``TRITON_INTERPRET`` (decided when vLLM is imported) and the thread
    binding (``VLLM_CPU_OMP_THREADS_BIND``), set by the bench.

    Operations (``op_*``): ``embed``, ``token_embed`` and ``score`` (one
    query, documents) run the ``LLM``; ``matmul_rate`` and the
    late-interaction counters run in the worker (``collective_rpc``)."""

    def __init__(self, name: str, model: str, llm_kwargs: dict | None = None):
        self._stack = ExitStack()
        self.llm, self._info = self._stack.enter_context(engine(name, model, **(llm_kwargs or {})))

    def info(self) -> dict:
        """What the worker reports (``engine``), and the vLLM that ran: its
        version, where it was imported from, the interpreter."""
        import sys

        import vllm

        return {**self._info, "vllm": vllm.__version__, "vllm_path": os.path.dirname(vllm.__file__),
                "python": sys.executable}

    def op_embed(self, items: list[str], return_embeddings: bool = False):
        """``LLM.embed`` of ``items``: ``{"n": count, "dim": d}``, and the
        [n, d] float32 embeddings when ``return_embeddings``."""
        import numpy as np

        outputs = self.llm.embed(items, use_tqdm=False)
        if not return_embeddings:
            return {"n": len(outputs), "dim": len(outputs[0].outputs.embedding) if outputs else 0}
        out = np.asarray([o.outputs.embedding for o in outputs], dtype=np.float32)
        return {"n": len(outputs), "dim": int(out.shape[1])}, out

    def op_token_embed(self, items: list[str]):
        """``LLM.encode(pooling_task="token_embed")`` of ``items``:
        ``{"n": count}``."""
        outputs = self.llm.encode(items, pooling_task="token_embed", use_tqdm=False)
        return {"n": len(outputs)}

    def op_score(self, query: str, docs: list[str]):
        """``LLM.score`` of one query against ``docs``: ``{"n": documents}``."""
        return {"n": len(self.llm.score(query, docs, use_tqdm=False))}

    def op_matmul_rate(self) -> dict:
        """``scripts.bench.machine.matmul_rate`` in the worker (its threads)."""
        from scripts.bench.machine import matmul_rate

        return self.llm.collective_rpc(matmul_rate)[0]

    def op_count_late_interaction_requests(self) -> None:
        """Start counting late-interaction requests in the worker."""
        from scripts.validation.engine import count_late_interaction_requests

        self.llm.collective_rpc(count_late_interaction_requests)

    def op_late_interaction_counts(self) -> dict:
        """The worker's late-interaction request counts by mode."""
        from scripts.validation.engine import late_interaction_counts

        (counts,) = {json.dumps(c, sort_keys=True) for c in self.llm.collective_rpc(late_interaction_counts)}
        return json.loads(counts)

    def close(self) -> None:
        """Shut the engine down (``close_llm``)."""
        self._stack.close()
