"""Engine lifecycle: open the patched engine on the CPU on a chosen runner,
assert which runner ran, close it. Shared by the smoke job, the matrix, the
tests and the benchmarks. The transformers / sentence-transformers
references they compare with live in ``scripts.validation.references``
(``st_embed``, ``forward``, ... importable from here too).

``vllm_runner(model, runner)`` is the one context manager that opens an
engine (``open_llm``), asserts its runner and input preparation
(``assert_runner``) and closes it (``close_llm``). ``open_llm(model, runner)`` picks the model runner through upstream's
``VLLM_USE_V2_MODEL_RUNNER`` (``"v2"`` sets 1, ``"v1"`` sets 0, ``"default"``
unsets it); ``runner_in_use(llm)`` asks the worker which runner class it
built, which is how every MRV2 check here proves that MRV2 actually ran;
``input_preparation(llm)`` tells how that MRV2 runner prepares its inputs
(native CPU kernels on a CPU without Triton, patch 0008; Triton kernels, compiled or
under ``TRITON_INTERPRET=1``, otherwise). ``quiet_vllm(job)`` (from
``scripts.common.quiet``) sends vLLM's output of a job to ``reports/logs/<job>.log``.
``WorkerProbe`` gives a server's worker the same probes, for
``scripts.validation.server``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from scripts.common.environ import environ, set_environ
from scripts.common.quiet import quiet_vllm  # noqa: F401 - the jobs' shared quieting (make, matrix, bench)
# the references the jobs and the tests compare engines with, importable from here too
from scripts.validation.references import (forward, hf_last_token_embed, hf_mean_embed,  # noqa: F401
                                           hf_pair_scores, l2_normalize, maxsim, st_embed)

# docs/base-and-recipe.md: the CPU worker reserves this share of the NUMA node's memory.
GPU_MEMORY_UTILIZATION = 0.3
RUNNER_ENV = {"v2": "1", "v1": "0", "default": None}


def runner_class(worker) -> str:
    """Qualified name of a worker's model runner (runs inside the worker)."""
    cls = type(worker.model_runner)
    return f"{cls.__module__}.{cls.__qualname__}"


def _late_interaction_runner(worker):
    runner = worker.model_runner
    pooling = getattr(runner, "pooling_runner", None)  # MRV2 composes it in its PoolingRunner
    return pooling.late_interaction_runner if pooling is not None else runner.late_interaction_runner


def late_interaction_state(worker) -> dict:
    """Runs in the worker: what its late-interaction runner holds (cached
    query keys, remaining uses, documents waiting for a query)."""
    li = _late_interaction_runner(worker)
    return {"cached_queries": sorted(li._query_cache), "query_uses": dict(li._query_uses),
            "pending_docs": len(li._doc_query_keys)}


def count_late_interaction_requests(worker) -> None:
    """Runs in the worker: count the requests registered with its
    late-interaction runner by mode (``cache_query``, ``score_doc``, None)
    from now on; read the counts with ``late_interaction_counts``."""
    li = _late_interaction_runner(worker)
    counts: dict = {}
    register = li.register_request

    def counting(req_id, pooling_params):
        lip = pooling_params.late_interaction_params if pooling_params is not None else None
        mode = lip.mode if lip is not None else None
        counts[mode] = counts.get(mode, 0) + 1
        return register(req_id, pooling_params)

    li.register_request = counting
    li.request_counts = counts


def late_interaction_counts(worker) -> dict:
    """Runs in the worker: the counts ``count_late_interaction_requests`` kept."""
    return dict(_late_interaction_runner(worker).request_counts)


def cudagraph_mode_of(worker) -> str:
    """Runs in the worker: the CUDA-graph mode its model runner resolved
    (``CUDAGraphMode`` name; ``NONE`` when no graph is captured), read from
    the compilation config both runners resolve it into."""
    return worker.model_runner.vllm_config.compilation_config.cudagraph_mode.name


def cudagraph_mode(llm) -> str:
    """``cudagraph_mode_of`` the engine's worker."""
    (mode,) = set(llm.collective_rpc(cudagraph_mode_of))
    return mode


def runner_in_use(llm) -> str:
    """``"MRV2"`` or ``"V1"``: the model runner the engine's worker really built.

    MRV2's runners live in ``vllm.v1.worker.gpu`` (and its CPU subclass in
    ``vllm.v1.worker.cpu``); V1's in ``vllm.v1.worker.*_model_runner``.
    Raises ``RuntimeError`` for anything else."""
    (name,) = set(llm.collective_rpc(runner_class))
    return runner_kind(name)


def input_preparation_kind(worker) -> str:
    """Runs in the worker: how its MRV2 runner prepares step inputs —
    ``"native"`` (patch 0008's native CPU kernels, no usable Triton),
    ``"triton-interpreter"`` (``TRITON_INTERPRET=1``, patch 0001) or
    ``"triton"`` (compiled Triton kernels). On the 0.26.0 line the runner's
    class attributes say it (``block_tables_cls``: ``NativeBlockTables``; a
    V1 runner has none and prepares no MRV2 inputs);
    from 0.32.0 on the native kernels are overrides registered with upstream's
    dispatcher (``KERNEL_OVERRIDES``), installed when every kernel they name
    is a ``KernelOverride`` in the worker. From 0.34.0 on, MRV2 without
    Triton is upstream's standalone CPU runner
    (``vllm.v1.worker.cpu.standalone_model_runner``), whose inputs are
    prepared by the CPU extension's ops (``gather_block_table_cpu`` and the
    others of ``csrc/cpu/input_batch.cpp``, ``block_table.cpp``; on x86 built
    by the 0.34.0 line's patch 0065): ``"native"`` when the worker's
    extension registers them."""
    import importlib
    import importlib.util

    from vllm.triton_utils.importing import TRITON_VIA_INTERPRETER

    if importlib.util.find_spec("vllm.v1.worker.cpu.standalone_model_runner") is not None:
        import torch

        from vllm.v1.worker.cpu.standalone_model_runner import StandaloneCPUModelRunner

        if isinstance(worker.model_runner, StandaloneCPUModelRunner):
            if not hasattr(torch.ops._C, "gather_block_table_cpu"):
                raise AssertionError("the standalone CPU runner ran without the CPU extension's input preparation ops")
            return "native"
        return "triton-interpreter" if TRITON_VIA_INTERPRETER else "triton"
    from vllm.v1.worker.cpu import input_preparation

    if hasattr(input_preparation, "NativeBlockTables"):
        block_tables_cls = getattr(type(worker.model_runner), "block_tables_cls", None)
        native = block_tables_cls is not None and issubclass(block_tables_cls, input_preparation.NativeBlockTables)
    else:
        from vllm.triton_utils.dispatcher import KernelOverride

        def overridden(name: str) -> bool:
            module_name, attr = name.rsplit(".", 1)
            return isinstance(getattr(importlib.import_module(module_name), attr), KernelOverride)

        native = all(overridden(name) for name in input_preparation.KERNEL_OVERRIDES)
    if native:
        return "native"
    return "triton-interpreter" if TRITON_VIA_INTERPRETER else "triton"


def input_preparation(llm) -> str:
    """``input_preparation_kind`` of the engine's worker (meaningful for MRV2)."""
    (kind,) = set(llm.collective_rpc(input_preparation_kind))
    return kind


def expected_input_preparation() -> str:
    """What MRV2 engines opened from this process will use on this machine:
    ``"triton-interpreter"`` when ``TRITON_INTERPRET=1`` is set, ``"triton"``
    with a CUDA device or triton-cpu, else ``"native"``."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "triton-interpreter"
    import torch

    try:
        from triton.backends import backends
    except ImportError:
        backends = {}
    return "triton" if torch.cuda.is_available() or "cpu" in backends else "native"


def assert_runner(llm, want: str) -> None:
    """Raise ``AssertionError`` unless the engine's worker runs ``want``
    (``"MRV2"`` or ``"V1"``) and, for MRV2, prepares inputs the way this
    machine should (``expected_input_preparation``)."""
    used = runner_in_use(llm)
    if used != want:
        raise AssertionError(f"{want} expected, {used} ran")
    if used == "MRV2":
        kind, expected = input_preparation(llm), expected_input_preparation()
        if kind != expected:
            raise AssertionError(f"MRV2 prepared inputs with {kind}, {expected} expected")


def select_runner(runner: str) -> None:
    """Set ``VLLM_USE_V2_MODEL_RUNNER`` for ``runner`` as a user would: ``v2``
    sets 1, ``v1`` sets 0, ``default`` unsets it. It stays set, so
    ``vllm_config.use_v2_model_runner`` (a property that reads the variable)
    keeps telling the truth about the engine opened after it. ``ValueError``
    for an unknown runner, and for ``v1`` where the base has none
    (``base_runners``)."""
    if runner not in RUNNER_ENV:
        raise ValueError(f"runner {runner!r}: use one of {sorted(RUNNER_ENV)}")
    if runner == "v1" and "V1" not in base_runners():
        raise ValueError("runner 'v1': this vLLM has no V1 model runner (removed in 0.34.0): use 'default' or 'v2'")
    set_environ({"VLLM_USE_V2_MODEL_RUNNER": RUNNER_ENV[runner]})


def engine_env() -> None:
    """Environment for engines opened here: models from local files only, and
    callables allowed in ``collective_rpc`` (``runner_in_use`` and the
    late-interaction probes run in the worker)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")


def open_llm(model: str, runner: str = "default", **kwargs):
    """An offline ``vllm.LLM`` for a pooling model on the CPU, fp32, with the
    model runner chosen by ``runner``. ``kwargs`` go to ``LLM``."""
    engine_env()
    from vllm import LLM

    options = dict(runner="pooling", dtype="float32", gpu_memory_utilization=GPU_MEMORY_UTILIZATION,
                   enforce_eager=True, seed=0)
    options.update(kwargs)
    select_runner(runner)
    # An engine still open in this process (its engine core runs here by default on
    # the CPU, patch 0055, or with VLLM_ENABLE_V1_MULTIPROCESSING=0) has had vLLM
    # cache its environment variables (EngineCore enables the cache; closing an
    # engine clears it): this engine must read its own runner choice.
    from vllm import envs

    envs.disable_envs_cache()
    return LLM(model=str(model), **options)


def close_llm(llm) -> None:
    """Shut an engine's processes down now (before the next engine starts, and
    so that the interpreter exits cleanly). An engine that ran in this process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) also has its distributed state torn
    down, so that the next engine can initialise it again."""
    import gc

    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()


# What ``vllm_runner`` expects to run for each ``runner`` choice: our series sends
# pooling models to MRV2 by default (patch 0003), except those patch 0011 keeps on V1.
EXPECTED_RUNNER = {"v2": "MRV2", "v1": "V1", "default": "MRV2"}
# The ``runner`` choice that opens each runner as users get it: MRV2 must be what
# vLLM picks by default, V1 is what ``VLLM_USE_V2_MODEL_RUNNER=0`` gives.
RUNNER_CHOICE = {"MRV2": "default", "V1": "v1"}


@contextmanager
def vllm_runner(model, runner: str = "default", want: str | None = None, check: bool = True,
                **kwargs) -> Iterator:
    """An offline ``vllm.LLM`` (``open_llm(model, runner, **kwargs)``) for the
    block, closed after it (``close_llm``), also when the block raises; the
    ``VLLM_USE_V2_MODEL_RUNNER`` of ``runner`` is set for the block only.

    Before yielding, asserts (``assert_runner``) that the worker runs ``want``
    (``"MRV2"`` or ``"V1"``; default ``EXPECTED_RUNNER[runner]``) and, on MRV2,
    prepares inputs the way this machine should: every engine opened through it
    shows which runner ran. ``check=False`` leaves the assertion to the caller:
    the benchmark measures a configuration that ran another runner and marks it
    (``scripts.bench.engines.engine``). Mirrors upstream's ``VllmRunner``
    fixture (tests/conftest.py), with the runner as a parameter.

    Raises ``ValueError`` for an unknown ``runner``, ``AssertionError`` when
    another runner (or input preparation) ran, and what ``LLM`` raises."""
    # open_llm sets the runner's choice (select_runner, which refuses an unknown one); it holds
    # while the engine lives (vllm_config.use_v2_model_runner reads it) and is restored after
    with environ(VLLM_USE_V2_MODEL_RUNNER=os.environ.get("VLLM_USE_V2_MODEL_RUNNER")):
        llm = open_llm(model, runner, **kwargs)
        try:
            if check:
                assert_runner(llm, want or EXPECTED_RUNNER[runner])
            yield llm
        finally:
            close_llm(llm)


def embed(llm, sentences: list[str], progress: bool = False, **kwargs) -> tuple[np.ndarray, float]:
    """Embeddings of ``sentences`` (float32, shape (N, d)) and the wall time in
    seconds of the ``LLM.embed`` call; ``progress`` shows vLLM's progress bar."""
    start = time.perf_counter()
    outputs = llm.embed(sentences, use_tqdm=progress, **kwargs)
    seconds = time.perf_counter() - start
    return np.asarray([o.outputs.embedding for o in outputs], dtype=np.float32), seconds


def rowwise_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of matching rows of two (N, d) arrays, shape (N,)."""
    return np.sum(l2_normalize(a) * l2_normalize(b), axis=1)


def sts_spearman(first: np.ndarray, second: np.ndarray, gold: list[float]) -> float:
    """Spearman correlation of the pairs' cosine similarity with the gold scores
    (how sentence-transformers and MTEB score STS)."""
    from scipy.stats import spearmanr

    return float(spearmanr(rowwise_cosine(first, second), gold).statistic)


def bundled_tcmalloc() -> Path:
    """The tcmalloc the CPU wheel bundles (revision 10), in the ``vllm``
    package this process imports: ``<vllm>/libs/libtcmalloc_minimal.so.4``."""
    import vllm

    return Path(vllm.__file__).parent / "libs" / "libtcmalloc_minimal.so.4"


def mapped_tcmalloc(worker=None) -> list[str]:
    """Paths of the tcmalloc libraries mapped into this process (sorted; the
    CPU wheel's engines preload the one in ``vllm/libs/``, revision 10).
    ``worker`` is unused: ``collective_rpc`` passes the worker."""
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libtcmalloc" in line})


class WorkerProbe:
    """Worker extension for servers (``vllm serve --worker-extension-cls
    scripts.validation.engine.WorkerProbe``): upstream mixes this class into the worker
    class (``WorkerWrapperBase.init_worker``), so a server started with
    ``VLLM_SERVER_DEV_MODE=1`` answers ``POST /collective_rpc {"method":
    "probe_runner_class"}`` from inside its worker, as ``LLM.collective_rpc``
    does offline. Each method returns JSON-able data (the endpoint turns
    anything else into ``str``)."""

    def probe_runner_class(self) -> str:
        """``runner_class``: qualified name of the worker's model runner."""
        return runner_class(self)

    def probe_input_preparation(self) -> str:
        """``input_preparation_kind``: how an MRV2 runner prepares its inputs."""
        return input_preparation_kind(self)

    def probe_tcmalloc(self) -> list[str]:
        """``mapped_tcmalloc``: the tcmalloc libraries mapped into the worker."""
        return mapped_tcmalloc()

    def probe_late_interaction_state(self) -> dict:
        """``late_interaction_state``: cached queries, their uses, pending documents."""
        return late_interaction_state(self)

    def probe_memory(self) -> dict:
        """After ``gc.collect()``: the worker's live Python objects, its
        resident memory (bytes), and its resident memory once the allocator
        has handed freed memory back to the system (``rss_after_release``;
        glibc's ``malloc_trim(0)``, and tcmalloc's
        ``MallocExtension_ReleaseFreeMemory()`` where it is preloaded, as the
        CPU wheel's engines have it: revision 10). Memory still resident
        after the release is in use; what the release returns was freed but
        kept by the allocator."""
        import ctypes
        import gc

        import psutil

        gc.collect()
        process = psutil.Process()
        rss = process.memory_info().rss
        this = ctypes.CDLL(None)
        for release in ("malloc_trim", "MallocExtension_ReleaseFreeMemory"):
            if hasattr(this, release):
                getattr(this, release)(*((0,) if release == "malloc_trim" else ()))
        return {"python_objects": len(gc.get_objects()), "rss": rss,
                "rss_after_release": process.memory_info().rss}


def base_runners() -> tuple[str, ...]:
    """The model runners the vLLM under test has, as ``runner_kind`` names
    them: ``("MRV2", "V1")`` up to 0.33.0, ``("MRV2",)`` from 0.34.0, which
    removed V1 (``vllm/v1/worker/gpu_model_runner.py``). Read from the
    importable tree (the line's applied tree, or an installed wheel), so no
    line has to state it."""
    import importlib.util

    return ("MRV2", "V1") if importlib.util.find_spec("vllm.v1.worker.gpu_model_runner") else ("MRV2",)


def runner_kind(class_name: str) -> str:
    """``"MRV2"`` or ``"V1"`` for a model runner's qualified class name (see
    ``runner_in_use``); ``RuntimeError`` for anything else."""
    if class_name.startswith(("vllm.v1.worker.gpu.", "vllm.v1.worker.cpu.")):
        return "MRV2"
    if class_name.startswith("vllm.v1.worker.") and "_model_runner." in class_name:
        return "V1"
    raise RuntimeError(f"unknown model runner {class_name}")
