"""Patch 0008 on the 0.32.0 line: the kernel dispatcher hands the launch grid
to overrides that ask for it (``vllm/triton_utils/dispatcher.py``,
``KernelOverride``): an implementation with a keyword-only ``grid`` parameter
gets the grid of every launch (MRV2's native kernels need it: padded rows
reach some kernels only as their grid); implementations without one are
called exactly as upstream calls them."""

from __future__ import annotations

import sys
import types

import pytest

# The kernel dispatcher is upstream's from 0.31.0 (the 0.26.0 base has none): the 0.32.0
# line's 0008 extends it.
pytestmark = pytest.mark.line("0.32.0")


def register(overrides):
    """The dispatcher's ``register_kernels`` (imported here: 0.26.0 has none)."""
    from vllm.triton_utils.dispatcher import register_kernels

    register_kernels(overrides)


def _kernel(out_ptr, in_ptr, n, BLOCK_SIZE):  # stands in for a @triton.jit kernel
    raise AssertionError("the original kernel must not run once overridden")


@pytest.fixture
def home(monkeypatch):
    module = types.ModuleType("vllm.tests_launch_grid_home")
    module.copy_kernel = _kernel
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_grid_reaches_an_override_that_declares_it(home):
    calls = []

    def impl(out_ptr, in_ptr, n, BLOCK_SIZE, *, grid=None):
        calls.append((out_ptr, in_ptr, n, BLOCK_SIZE, grid))

    from vllm.triton_utils.dispatcher import KernelOverride

    register({"vllm.tests_launch_grid_home.copy_kernel": impl})
    kernel = home.copy_kernel
    assert isinstance(kernel, KernelOverride)
    kernel[(3, 5)]("o", "i", 7, BLOCK_SIZE=128)  # positional launch, constexpr by keyword
    kernel[(4,)](out_ptr="o", in_ptr="i", n=7, BLOCK_SIZE=64)  # keyword launch (warmup)
    kernel[lambda meta: (meta["n"] * 2,)](out_ptr="o", in_ptr="i", n=3, BLOCK_SIZE=8)
    kernel("o", "i", 1, 16)  # called, not launched: the default grid
    assert calls == [
        ("o", "i", 7, 128, (3, 5)),
        ("o", "i", 7, 64, (4,)),
        ("o", "i", 3, 8, (6,)),
        ("o", "i", 1, 16, None),
    ]


def test_grid_reaches_an_override_with_other_names_in_kernel_order(home):
    calls = []

    def impl(out, src, count, block, *, grid=None):
        calls.append((out, src, count, block, grid))

    register({"vllm.tests_launch_grid_home.copy_kernel": impl})
    home.copy_kernel[(2,)](out_ptr="o", in_ptr="i", n=9, BLOCK_SIZE=32)
    assert calls == [("o", "i", 9, 32, (2,))]


def test_an_override_without_grid_is_called_as_upstream_calls_it(home):
    calls = []

    def impl(out_ptr, in_ptr, n, BLOCK_SIZE):
        calls.append((out_ptr, in_ptr, n, BLOCK_SIZE))

    register({"vllm.tests_launch_grid_home.copy_kernel": impl})
    home.copy_kernel[(3,)]("o", "i", 7, BLOCK_SIZE=128)
    home.copy_kernel[(3,)](out_ptr="o", in_ptr="i", n=7, BLOCK_SIZE=128)
    assert calls == [("o", "i", 7, 128), ("o", "i", 7, 128)]


def test_a_positional_grid_parameter_is_a_kernel_argument_not_the_grid(home):
    # Only a keyword-only ``grid`` asks for the launch grid; a positional
    # parameter of that name stays a kernel argument, as upstream binds it.
    def grid_kernel(out_ptr, grid):
        raise AssertionError("overridden")

    home.grid_kernel = grid_kernel
    calls = []

    def impl(out_ptr, grid):
        calls.append((out_ptr, grid))

    register({"vllm.tests_launch_grid_home.grid_kernel": impl})
    home.grid_kernel[(9,)](out_ptr="o", grid="argument")
    assert calls == [("o", "argument")]
