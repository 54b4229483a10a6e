"""Upstream's own unit tests of PR 50574 ([Model Runner V2] Enable encoder
token embedding), unmodified, against our tree: the tests of upstream's
``test_splade_sparse_pooler.py`` that exercise the PoolingRunner contract the
series builds on (the 0.26.0 line's patches 0003, 0004 and 0006 implement
it; later bases carry it) — ``PoolingRunner(model, vllm_config)``, token
tasks by attention type, late-interaction documents released when aborted,
the lifecycle hooks.

Which sdist and which tests are base facts of the line (``base.toml``,
``[upstream-sources.pr50574]``: the sdist pinned by sha256 and its
``tests``, node ids relative to its top directory; ``python -m
scripts.series.base show``): each line runs the tests as the release it
names ships them, since a later release may move, rewrite or rename them.
The sdist is fetched with pip at test time (``scripts.series.base.fetch``),
cached, never committed. The test files run in a fresh pytest process, alone
in a scratch directory (upstream's conftest.py needs upstream's test
environment), with the line's ``vllm`` on the path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile

import pytest

from scripts.common.paths import child_pythonpath
from scripts.series.base import fetch, upstream_sources


@pytest.fixture(scope="module")
def upstream_tests(tmp_path_factory):
    """The scratch directory holding the test files of the pinned tests,
    extracted from the pinned sdist at their paths in it, and the tests'
    node ids there."""
    sources = upstream_sources("pr50574")
    assert sources.tests, "base.toml's [upstream-sources.pr50574] names no tests"
    sdist = fetch(sources)
    dest = tmp_path_factory.mktemp("upstream-pr50574")
    with tarfile.open(sdist) as tar:
        for path in dict.fromkeys(test.split("::")[0] for test in sources.tests):
            member = f"vllm-{sources.version}/{path}"
            source = tar.extractfile(member)
            assert source is not None, f"{member} is not in {sdist.name}"
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            (dest / path).write_bytes(source.read())
    return dest, list(sources.tests)


def test_upstream_pr50574_pooling_runner_tests_pass_unmodified(upstream_tests):
    root, tests = upstream_tests
    env = dict(os.environ, PYTHONPATH=child_pythonpath())
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider",
         "--rootdir", str(root), "-o", "addopts=", "-W", "ignore::DeprecationWarning"],
        cwd=root, env=env, capture_output=True, text=True, timeout=900)
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    summary = re.findall(r"^=*\s*(\d+ passed[^\n]*?) in [\d.]+s", proc.stdout, re.M)
    assert proc.returncode == 0 and summary == [f"{len(tests)} passed"], tail
