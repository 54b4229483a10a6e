"""Patch 0037: the CPU platform bounds oneDNN's process-wide primitive cache
for the engine's processes (they inherit the environment the platform sets
while the engine's config is made), unless the user set a capacity.

Without it a serving worker's resident memory grows with every new step
shape: +185 MiB over 15,000 late-interaction /rerank requests on a tiny
ColBERT server (MRV2 and V1 alike), +535 MiB in a MiniLM /v1/embeddings
server after 10,000 requests (docs/performance.md, "Serving")."""

from __future__ import annotations

import os
from unittest import mock

from tests.unit.stand_ins import minilm_engine_config

VAR = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"


def test_engine_config_bounds_the_onednn_primitive_cache():
    with mock.patch.dict(os.environ):  # the environment the platform writes is restored after
        os.environ.pop(VAR, None)
        minilm_engine_config()
        assert os.environ[VAR] == "64"


def test_a_capacity_the_user_set_is_kept():
    with mock.patch.dict(os.environ, {VAR: "512"}):
        minilm_engine_config()
        assert os.environ[VAR] == "512"
