"""The quiet jobs (``scripts.common.quiet``): in a process that called
``quiet_vllm``, its own prints stay on the terminal while vLLM's log lines,
native writes to the standard descriptors, the output of the processes it
starts and Python warnings go to the log file; ``VERBOSE=1`` keeps
everything on the terminal."""

from __future__ import annotations

import os
import subprocess
import sys

from scripts.common.paths import child_pythonpath

JOB = """
import os, subprocess, sys, warnings
from pathlib import Path
from scripts.common.quiet import quiet_vllm
log = quiet_vllm("job", Path(sys.argv[1]))
print("job line")
os.write(1, b"native write\\n")
subprocess.run([sys.executable, "-c", "print('engine process output')"], check=True)
from vllm.logger import _configure_vllm_root_logger, init_logger
_configure_vllm_root_logger()  # as an engine does (0.26.0: at import; later releases: when an engine is made)
init_logger("vllm.quiet_test").info("vllm log line")
warnings.warn("a python warning")
import logging
logging.getLogger("torch.quiet_test").warning("torch log line")
print("table", file=sys.stderr)
"""


def run_job(tmp_path, **env):
    return subprocess.run([sys.executable, "-c", JOB, str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": child_pythonpath(), "HF_HUB_OFFLINE": "1", **env}, check=True)


def test_vllm_output_goes_to_the_log(tmp_path):
    proc = run_job(tmp_path)
    log = (tmp_path / "job.log").read_text()
    assert proc.stdout == f"vLLM's output (log lines, engine processes): {tmp_path / 'job.log'}\njob line\n"
    assert proc.stderr == "table\n"
    for line in ("native write", "engine process output", "vllm log line", "a python warning", "torch log line"):
        assert line in log
    assert "job line" not in log and "table" not in log


def test_verbose_keeps_everything_on_the_terminal(tmp_path):
    proc = run_job(tmp_path, VERBOSE="1")
    assert not (tmp_path / "job.log").exists()
    for line in ("job line", "native write", "engine process output", "vllm log line"):
        assert line in proc.stdout
