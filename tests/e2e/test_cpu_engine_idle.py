"""Patch 0054 through the engine: an MRV2 engine on the CPU whose call has
returned burns no CPU in any of its processes. Before it, the engine core and
the worker polled their shared-memory queue for a second after each read
(upstream's ``SpinCondition`` busy loop): about 1 CPU-s each after every call,
and while the worker computed, the engine core polled the other core (2,230 ms
per 1,000 sentences embedded, issue 27).

Both process layouts an offline engine can have: the default one (patch 0055:
the engine core in the caller's process, the worker in its own) and the one a
user gets with ``VLLM_ENABLE_V1_MULTIPROCESSING=1`` (the engine core in a
process of its own, as ``vllm serve`` runs it)."""

from __future__ import annotations

import time

import psutil
import pytest

from scripts.common.environ import environ
from scripts.validation.checkpoints.models import minilm_path
from scripts.validation.engine import embed, vllm_runner

IDLE_S = 1.5
# what a blocked process may still spend in IDLE_S: vLLM's own timers and threads
IDLE_CPU_S = 0.15
# VLLM_ENABLE_V1_MULTIPROCESSING of each layout, and whether it has an EngineCore process
LAYOUTS = {"default": (None, False), "engine core process": ("1", True)}


def _cpu_seconds(processes: list[psutil.Process]) -> dict[str, float]:
    times = {}
    for process in processes:
        t = process.cpu_times()
        times[f"{process.pid} {process.name()}"] = t.user + t.system
    return times


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_engines_processes_burn_no_cpu_after_a_call(sts, layout):
    multiprocessing, core_process = LAYOUTS[layout]
    with environ(VLLM_ENABLE_V1_MULTIPROCESSING=multiprocessing), \
            vllm_runner(minilm_path(), "default") as llm:  # asserts that MRV2 runs
        children = psutil.Process().children(recursive=True)
        names = [p.name() for p in children]
        assert sum("EngineCore" in n for n in names) == int(core_process), names
        assert sum("Worker" in n for n in names) == 1, names
        # the caller's process runs the engine core in the default layout: it must not poll either
        engine = children + [psutil.Process()]
        vectors, _ = embed(llm, sts.sentences[:256])
        assert vectors.shape == (256, 384)
        before = _cpu_seconds(engine)
        time.sleep(IDLE_S)
        after = _cpu_seconds(engine)
    spent = {name: round(after[name] - before[name], 3) for name in before}
    assert max(spent.values()) < IDLE_CPU_S, f"CPU-s per process in {IDLE_S} s after the call: {spent}"
