"""End-to-end rows: the patched engine on the CPU against transformers /
sentence-transformers on the same weights (DESIGN.md, validation matrix).

MRV2 needs Triton; where Triton has no CPU backend, Triton's interpreter is
switched on here, before vLLM is first imported (vLLM decides HAS_TRITON at
import; patch 0001 makes the interpreter count)."""

from __future__ import annotations

import pytest

from scripts.engine import use_triton_interpreter_if_needed
from scripts.models import sts_test

INTERPRETER = use_triton_interpreter_if_needed()


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def sts():
    return sts_test()
