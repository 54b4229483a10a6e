"""Patch 0055 through the engine: an offline ``LLM`` for a pooling model on
the CPU runs two processes, the caller's (front end and engine core) and one
worker, instead of three; the worker keeps its own process and with it the
OpenMP binding the user asked for, and the embeddings are
sentence-transformers'. (Memory by process, before and after:
docs/performance.md; the figures come from ``make bench``, not from here.)"""

from __future__ import annotations

import os

import psutil

from scripts.common.environ import environ
from scripts.validation.checkpoints.models import minilm_path
from scripts.validation.engine import embed, rowwise_cosine, st_embed, vllm_runner

MIN_COSINE = 0.99999


def worker_placement(worker) -> dict:
    """Runs in the worker: its process id, torch threads and the CPUs it may run on."""
    import torch

    return {"pid": os.getpid(), "threads": torch.get_num_threads(), "cpus": sorted(os.sched_getaffinity(0))}


def test_offline_pooling_engine_runs_in_the_callers_process_and_one_worker(sts):
    from vllm.v1.engine.core_client import InprocClient

    sentences = sts.sentences[:64]
    with environ(VLLM_ENABLE_V1_MULTIPROCESSING=None, VLLM_CPU_OMP_THREADS_BIND="0"), \
            vllm_runner(minilm_path(), "default") as llm:  # asserts that MRV2 runs
        assert isinstance(llm.llm_engine.engine_core, InprocClient)
        names = [p.name() for p in psutil.Process().children(recursive=True)]
        assert not any("EngineCore" in n for n in names), names
        (placement,) = llm.collective_rpc(worker_placement)
        vectors, _ = embed(llm, sentences)
    assert placement["pid"] != os.getpid()  # the worker has a process of its own
    assert (placement["threads"], placement["cpus"]) == (1, [0])  # and the binding it was given
    assert rowwise_cosine(vectors, st_embed(minilm_path(), sentences)).min() >= MIN_COSINE
