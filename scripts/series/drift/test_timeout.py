"""A pytest plugin for ``drift test-upstream`` (``-p scripts.series.drift.test_timeout``):
each test gets at most ``VDIST_TEST_TIMEOUT`` seconds (600 by default), after
which it fails with ``TimeoutError``, so that a test waiting for a behaviour
a release does not have (an event that never comes) fails instead of holding
up the release's other tests. The alarm is ``SIGALRM`` in the main thread:
a test blocked in C code without returning to Python is not interrupted (the
run's own timeout covers that)."""

from __future__ import annotations

import os
import signal

import pytest


def _timeout() -> int:
    return int(os.environ.get("VDIST_TEST_TIMEOUT", "600"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Run ``item`` under an alarm of ``VDIST_TEST_TIMEOUT`` seconds."""
    seconds = _timeout()

    def expire(signum, frame):
        raise TimeoutError(f"{item.nodeid} ran longer than {seconds} s (drift test-upstream's limit per test)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
