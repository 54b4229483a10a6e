"""Upstream's own unit tests of PR 50574 ([Model Runner V2] Enable encoder
token embedding), unmodified, against our tree (patches 0003, 0004, 0006):
the four tests of ``tests/models/language/pooling/test_splade_sparse_pooler.py``
that exercise the PoolingRunner contract our patches implement —
``PoolingRunner(model, vllm_config)``, token tasks for encoder-only models
only, late-interaction documents released when aborted, the lifecycle hooks.

The test file comes from upstream's 0.27.1 source distribution, fetched with
pip at test time (``scripts.series.base.fetch``: sha256 pinned in the line's base.toml,
``[upstream-sources.pr50574]``), cached, never committed. It runs in a fresh
pytest process, alone in a scratch directory (upstream's conftest.py needs
upstream's test environment), with this repository's ``vllm/`` on the path.
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

UPSTREAM_FILE = "tests/models/language/pooling/test_splade_sparse_pooler.py"
TESTS = [
    "test_pooling_runner_supports_encoder_token_embedding",
    "test_pooling_runner_filters_decoder_token_embedding",
    "test_pooling_runner_releases_aborted_late_interaction_doc",
    "test_encoder_cache_reset_clears_late_interaction_state",
]


@pytest.fixture(scope="module")
def upstream_test_file(tmp_path_factory):
    """The upstream test file, extracted from the pinned sdist."""
    sdist = fetch(upstream_sources("pr50574"))
    member = f"vllm-{upstream_sources('pr50574').version}/{UPSTREAM_FILE}"
    dest = tmp_path_factory.mktemp("upstream-pr50574")
    with tarfile.open(sdist) as tar:
        source = tar.extractfile(member)
        assert source is not None, f"{member} is not in {sdist.name}"
        path = dest / "test_splade_sparse_pooler.py"
        path.write_bytes(source.read())
    return path


def test_upstream_pr50574_pooling_runner_tests_pass_unmodified(upstream_test_file):
    ids = [f"{upstream_test_file}::{name}" for name in TESTS]
    env = dict(os.environ, PYTHONPATH=child_pythonpath())
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *ids, "-q", "-p", "no:cacheprovider",
         "--rootdir", str(upstream_test_file.parent), "-o", "addopts=",
         "-W", "ignore::DeprecationWarning"],
        cwd=upstream_test_file.parent, env=env, capture_output=True, text=True, timeout=900)
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    summary = re.findall(r"^=*\s*(\d+ passed[^\n]*?) in [\d.]+s", proc.stdout, re.M)
    assert proc.returncode == 0 and summary == [f"{len(TESTS)} passed"], tail
