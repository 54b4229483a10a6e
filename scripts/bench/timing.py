"""Timing side by side: named calls run in interleaved rounds (the order
rotating each round, a settle pause before each), and their medians as rates
and as ratios of each MRV2 configuration to V1 and to sentence-transformers."""

from __future__ import annotations

import statistics
import time

from scripts.bench.engines import ST

# An engine's shared-memory readers busy-poll for 1 s after their last message
# (vLLM's SpinCondition); a timed call starts once the previous one's are idle.
SETTLE_S = 1.1


def interleaved(calls: dict, reps: int, warmups: dict | None = None, bar=None,
                settle_s: float = SETTLE_S) -> dict[str, list[float]]:
    """Run each named call once to warm up (``warmups[name]`` instead, when
    given), then ``reps`` rounds of all of them, the order rotating each round,
    ``settle_s`` seconds of pause before each timed call; seconds per call.
    ``bar``: a tqdm bar advanced once per timed call."""
    for name, fn in calls.items():
        (warmups or {}).get(name, fn)()
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            if bar is not None:
                bar.set_postfix_str(name if isinstance(name, str) else " ".join(map(str, name)))
            time.sleep(settle_s)
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
            if bar is not None:
                bar.update(1)
    return times


def rates(times: dict[str, list[float]], items: int, tokens: int | None = None) -> dict:
    """For each named call: median seconds (``median_s``), the times
    (``times_s``), ``items`` per second (``per_s``) and, given ``tokens``,
    tokens per second (``tokens_per_s``). ``StatisticsError`` for a call
    without times."""
    out = {}
    for name, t in times.items():
        med = statistics.median(t)
        row = {"median_s": med, "times_s": t, "per_s": items / med}
        if tokens is not None:
            row["tokens_per_s"] = tokens / med
        out[name] = row
    return out


def ratios(per_s: dict[str, float]) -> dict[str, float]:
    """Ratios of each MRV2 configuration to ``v1`` and to sentence-transformers
    (items per second), keyed ``"mrv2/v1"`` etc., for the configurations present."""
    out = {}
    for name in ("mrv2", "mrv2-interpreter"):
        for ref in ("v1", ST):
            if name in per_s and ref in per_s:
                out[f"{name}/{ref}"] = per_s[name] / per_s[ref]
    return out
