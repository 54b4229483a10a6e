"""Patch 0001: TRITON_INTERPRET=1 makes Triton count as available (on a CPU
without a Triton backend); without the variable nothing changes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scripts.series.base import REPO

PROBE = ("from vllm.triton_utils import HAS_TRITON; "
         "from vllm.triton_utils.importing import TRITON_VIA_INTERPRETER; "
         "import vllm; print('PROBE', HAS_TRITON, TRITON_VIA_INTERPRETER, vllm.__file__)")


def probe(**env_overrides) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(env_overrides, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    out = [line for line in out.splitlines() if line.startswith("PROBE ")][0].split()[1:]
    assert out[2] == str(REPO / "vllm" / "__init__.py")  # the in-tree, patched vllm
    return out[:2]


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


# Where Triton has a GPU backend, HAS_TRITON is true without the interpreter and
# the patch changes nothing: what these tests describe is a machine without one.
needs_no_gpu = pytest.mark.skipif(
    "has_gpu()", reason="a GPU is present: Triton has a backend and the interpreter patch does not apply")


@needs_no_gpu
def test_without_variable_triton_unavailable_on_this_cpu():
    assert probe() == ["False", "False"]


@needs_no_gpu
def test_interpreter_makes_triton_available():
    assert probe(TRITON_INTERPRET="1") == ["True", "True"]


@pytest.mark.skipif("not has_gpu()", reason="needs a GPU, where Triton has a backend of its own")
def test_interpreter_leaves_a_triton_backend_alone():
    assert probe(TRITON_INTERPRET="1") == ["True", "False"]


def test_other_values_change_nothing():
    assert probe(TRITON_INTERPRET="0") == probe()
