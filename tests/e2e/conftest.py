"""End-to-end rows: the patched engine on the CPU against transformers /
sentence-transformers on the same weights (docs/validation.md).

MRV2 runs here as a user gets it: on a CPU without a Triton backend, with the
native input preparation of patch 0008. ``TRITON_INTERPRET=1 make
test-e2e`` runs the same rows with MRV2's Triton kernels under Triton's
interpreter instead (much slower)."""

from __future__ import annotations

import os

import pytest

from scripts.common.environ import environ
from scripts.validation.checkpoints.models import sts_test

INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def sts():
    return sts_test()


@pytest.fixture(scope="module")
def in_process():
    """Engines of the module run in the test's process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): start-up in seconds instead of a
    process spawn and a second torch import per engine. Not for tests that
    must survive a hanging engine (those need the engine core's own process)."""
    with environ(VLLM_ENABLE_V1_MULTIPROCESSING="0"):
        yield
