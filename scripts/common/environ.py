"""Environment variables set for a block and restored after it: the one way the
tooling changes vLLM's environment-driven switches (``VLLM_USE_V2_MODEL_RUNNER``,
``TRITON_INTERPRET``, ``VLLM_ENABLE_V1_MULTIPROCESSING``, ...)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def set_environ(values: dict[str, str | None]) -> dict[str, str | None]:
    """Set each variable to its ``str`` value, unset it for ``None``; return
    the previous values (``None``: was unset), for ``set_environ`` to restore."""
    saved = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return saved


@contextmanager
def environ(**values: str | None) -> Iterator[None]:
    """Inside the block the variables are set (``str``) or unset (``None``);
    after it they are what they were before, also when the block raises."""
    saved = set_environ(values)
    try:
        yield
    finally:
        set_environ(saved)
