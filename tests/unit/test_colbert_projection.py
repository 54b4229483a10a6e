"""Patch 0005: a BERT ColBERT checkpoint (HF_ColBERT) whose config.json
declares its projection size builds: the model class the registry resolves
for it constructs, and its pooler projects to that size. Upstream's names
only (the registry, EngineArgs, the model's ``pooler``). Built in a
subprocess: it initialises torch.distributed (world size 1, gloo)."""

from __future__ import annotations

import os
import subprocess
import sys

from scripts.common.paths import child_pythonpath

PROBE = r"""
import socket, sys
import torch
from vllm.config.vllm import set_current_vllm_config
from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.models.registry import ModelRegistry

config = EngineArgs(model=sys.argv[1], runner="pooling", dtype="float32").create_engine_config()
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
with set_current_vllm_config(config):
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"tcp://127.0.0.1:{port}")
    ensure_model_parallel_initialized(1, 1)
    cls, arch = ModelRegistry.resolve_model_cls(config.model_config.architectures, config.model_config)
    model = cls(vllm_config=config)
    linears = [(m.in_features, m.out_features) for m in model.pooler.modules() if isinstance(m, torch.nn.Linear)]
    print("PROBE", arch, cls.__name__, linears)
"""


def test_colbert_with_declared_dim_builds(tmp_path):
    from scripts.validation.checkpoints.zoo import make_tiny_colbert

    model_dir = make_tiny_colbert(tmp_path / "colbert", backbone="bert", dim=24)
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(model_dir)], env=env, text=True,
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("PROBE ")][-1]
    assert line == "PROBE HF_ColBERT ColBERTModel [(128, 24)]"
