"""Runner selection through the engine (patch 0007): without Triton (no
TRITON_INTERPRET on this CPU) a pooling model falls back to the V1 runner
with upstream's warning, and still serves. (With Triton, the validation rows
of test_pooling_mrv2.py and test_late_interaction_mrv2.py assert that MRV2
is chosen by default.)"""

from __future__ import annotations

import os
import subprocess
import sys

from scripts.base import REPO

SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
from scripts.engine import close_llm, embed, open_llm, rowwise_cosine, runner_in_use, st_embed
from scripts.models import minilm_path, sts_test

if __name__ == "__main__":
    sentences = sts_test().sentences[:64]
    llm = open_llm(minilm_path(), runner="default")
    print("RUNNER", runner_in_use(llm), llm.llm_engine.vllm_config.use_v2_model_runner)
    got, _ = embed(llm, sentences)
    close_llm(llm)
    print("MIN_COSINE", float(rowwise_cosine(got, st_embed(minilm_path(), sentences)).min()))
"""


def test_pooling_model_without_triton_falls_back_to_v1_and_serves():
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "VLLM_USE_V2_MODEL_RUNNER")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(repo=str(REPO))], env=env,
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Model Runner V2 requires Triton; using the V1 model runner instead." in out
    assert "RUNNER V1 False" in proc.stdout
    cos = float(proc.stdout.split("MIN_COSINE")[1].split()[0])
    assert cos >= 0.99999
