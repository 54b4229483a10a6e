"""Patch 0054 through the engine: an MRV2 engine on the CPU whose call has
returned burns no CPU in its engine core and worker. Before it, both polled
their shared-memory queue for a second after each read (upstream's
``SpinCondition`` busy loop): about 1 CPU-s each after every call, and while
the worker computed, the engine core polled the other core (2,230 ms per
1,000 sentences embedded, issue 27)."""

from __future__ import annotations

import time

import psutil

from scripts.validation.checkpoints.models import minilm_path
from scripts.validation.engine import embed, vllm_runner

IDLE_S = 1.5
# what a blocked process may still spend in IDLE_S: vLLM's own timers and threads
IDLE_CPU_S = 0.15


def _cpu_seconds(processes: list[psutil.Process]) -> dict[str, float]:
    times = {}
    for process in processes:
        t = process.cpu_times()
        times[f"{process.pid} {process.name()}"] = t.user + t.system
    return times


def test_engine_core_and_worker_burn_no_cpu_after_a_call(sts):
    with vllm_runner(minilm_path(), "default") as llm:  # asserts that MRV2 runs
        engine = psutil.Process().children(recursive=True)
        names = sorted(p.name() for p in engine)
        assert any("EngineCore" in n for n in names) and any("Worker" in n for n in names), names
        vectors, _ = embed(llm, sts.sentences[:256])
        assert vectors.shape == (256, 384)
        before = _cpu_seconds(engine)
        time.sleep(IDLE_S)
        after = _cpu_seconds(engine)
    spent = {name: round(after[name] - before[name], 3) for name in before}
    assert max(spent.values()) < IDLE_CPU_S, f"CPU-s per process in {IDLE_S} s after the call: {spent}"
