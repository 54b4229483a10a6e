"""Patch 0001: TRITON_INTERPRET=1 makes Triton count as available
(``vllm.triton_utils.HAS_TRITON``, the name vLLM's own code reads) on a CPU
without a Triton backend; other values of the variable change nothing.

The mapped tests (the line's tests.toml) ask only ``HAS_TRITON``, which every
release has, in a fresh interpreter (vLLM decides it at import): a release
that counts the interpreter as a backend passes them. The interpreter tests
run where Triton has no usable backend whatever the machine holds: the child
empties Triton's backend registry before vLLM reads it (``NO_BACKEND``), as on
a CPU without triton-cpu.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "import vllm; from vllm.triton_utils import HAS_TRITON; print('PROBE', HAS_TRITON, vllm.__file__)"
# Triton installed without a backend it can use (no triton-cpu, no GPU driver)
NO_BACKEND = "import triton.backends; triton.backends.backends.clear(); "


def probe(code: str = PROBE, **env_overrides) -> list[str]:
    """What ``code`` prints after ``PROBE`` in a fresh interpreter importing
    the vllm this process imports (the tree under test), ``TRITON_INTERPRET``
    unset unless given."""
    import vllm

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(env_overrides, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    fields = [line for line in out.splitlines() if line.startswith("PROBE ")][0].split()[1:]
    assert fields[-1] == vllm.__file__  # the child imported the same tree
    return fields[:-1]


def test_without_a_backend_triton_is_unavailable():
    assert probe(NO_BACKEND + PROBE) == ["False"]


def test_interpreter_makes_triton_available():
    assert probe(NO_BACKEND + PROBE, TRITON_INTERPRET="1") == ["True"]


def test_other_values_change_nothing():
    assert probe(NO_BACKEND + PROBE, TRITON_INTERPRET="0") == ["False"]


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif("not has_gpu()", reason="needs a GPU, where Triton has a backend of its own")
def test_interpreter_leaves_a_triton_backend_alone():
    """Where Triton has a backend the patch's own flag stays off (the V1 CPU
    runner's C++ replacements key on it); this names the series' flag, so it
    is not a mapped test."""
    code = ("import vllm; from vllm.triton_utils.importing import TRITON_VIA_INTERPRETER; "
            "print('PROBE', TRITON_VIA_INTERPRETER, vllm.__file__)")
    assert probe(code, TRITON_INTERPRET="1") == ["False"]
