"""The GPU smoke job (scripts/validation/gpu_smoke.py, ``make gpu-smoke``,
ci/steps/gpu-smoke.sh) on a machine without a GPU: it stops at once, says
why, exits 77 and leaves reports whose one test case is *skipped*; nothing is
built. On a machine with a GPU the job runs instead, so these tests skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from scripts.series.base import REPO


def gpu_present() -> bool:
    from scripts.validation.gpu_smoke import find_gpu

    return find_gpu()[0]


no_gpu = pytest.mark.skipif("gpu_present()", reason="a GPU is present: make gpu-smoke runs the job there")
MESSAGE = "gpu-smoke: SKIPPED: no GPU on this machine"


def run(cmd, out, **env):
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "GPU_SMOKE_OUT": str(out), **env})


def assert_skipped_reports(out) -> None:
    suite = ET.parse(out / "gpu-smoke-junit.xml").getroot()
    assert (suite.get("tests"), suite.get("skipped"), suite.get("failures")) == ("1", "1", "0")
    (case,) = suite.iter("testcase")
    assert [child.tag for child in case] == ["skipped"]
    assert case[0].get("message").startswith("no GPU on this machine")
    assert json.loads((out / "gpu-smoke.json").read_text())["status"] == "skipped"


@no_gpu
def test_the_job_exits_77_and_reports_skipped(tmp_path):
    proc = run([sys.executable, "-m", "scripts.validation.gpu_smoke"], tmp_path)
    assert proc.returncode == 77, proc.stderr
    assert MESSAGE in proc.stderr
    assert "Exit status 77: skipped, not passed." in proc.stderr
    assert_skipped_reports(tmp_path)


@no_gpu
def test_make_gpu_smoke_stops_before_building_anything(tmp_path):
    venv = tmp_path / "venv-cuda"
    proc = run(["make", "-s", "gpu-smoke", f"GPU_SMOKE_OUT={tmp_path}", f"GPU_VENV={venv}"], tmp_path)
    # make turns its recipe's 77 into its own 2, naming the 77
    assert proc.returncode == 2
    assert MESSAGE in proc.stderr and "gpu-smoke] Error 77" in proc.stderr
    assert not venv.exists()
    assert_skipped_reports(tmp_path)


@no_gpu
def test_the_ci_step_exits_77_and_annotates_the_build(tmp_path):
    """With a stand-in ``buildkite-agent`` first on the PATH, recording its
    arguments (the step annotates the build when the agent is there)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    agent = bin_dir / "buildkite-agent"
    agent.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "agent-args"}\n')
    agent.chmod(0o755)
    path = f"{bin_dir}:{os.path.dirname(sys.executable)}:{os.environ['PATH']}"
    proc = run(["bash", "ci/steps/gpu-smoke.sh"], tmp_path, PATH=path)
    assert proc.returncode == 77, proc.stderr
    assert MESSAGE in proc.stderr
    args = (tmp_path / "agent-args").read_text().splitlines()
    assert args[:5] == ["annotate", "--style", "warning", "--context", "gpu-smoke"]
    assert "GPU smoke job **skipped**" in args[5]
    assert_skipped_reports(tmp_path)


@pytest.mark.parametrize(("kind", "dtype", "got", "expected"), [
    # float32: the largest difference
    ("scores", "float32", [0.2, 0.50005, 0.8], ("max abs error", 5e-5, True)),
    ("vectors", "float32", [[0.6, 0.8], [1.0, 0.0002]], ("max abs error", 2e-4, False)),
    # bfloat16 scores: the cosine of their deviations from the reference's mean
    ("scores", "bfloat16", [0.8, 0.5, 0.2], ("cosine (centred scores)", -1.0, False)),
    ("scores", "bfloat16", [0.19, 0.5, 0.81], ("cosine (centred scores)", 1.0, True)),
])
def test_comparison_metrics(kind, dtype, got, expected):
    from scripts.validation.gpu_smoke import compare

    ref = np.array([0.2, 0.5, 0.8]) if kind == "scores" else np.array([[0.6, 0.8], [1.0, 0.0]])
    metric, value, _, passed = compare(kind, dtype, np.asarray(got, dtype=np.float64), ref)
    assert (metric, passed) == expected[::2]
    np.testing.assert_allclose(value, expected[1], rtol=1e-6, atol=1e-9)
