"""Runner selection by pooling task: which runner a pooling model gets for the
task it will be asked for, where the lines' bases differ.

On the 0.26.0 line (patch 0011) MRV2 serves token-level tasks for
encoder-only models only (upstream PR 50574's contract in 0.27.0): a pooling
model whose configured task, or whose only tasks, MRV2 does not serve
(token-level tasks on a decoder) keeps V1 by default, with upstream's
warning for a feature MRV2 does not support naming the task; forcing MRV2 on
it is a start-up error naming the task and VLLM_USE_V2_MODEL_RUNNER=0. Before
the patch these models were sent to MRV2 and failed at start-up ("Model
Runner V2 serves none of this model's pooling tasks"). From 0.28.0 upstream's
MRV2 pooling runner serves decoders' token-level tasks too, so on the 0.32.0
line (no 0011) these models run on MRV2, with or without Triton (its 0008
sends a task MRV2 does not serve at all to V1 where Triton is absent:
test_runner_selection_without_triton.py). Each line's rule is tested on its
line (``line`` marker); what both lines do alike is tested on both. Real
configs (``EngineArgs.create_engine_config``) of small local checkpoints;
configs only, no weights are loaded."""

from __future__ import annotations

import pytest

from tests.unit.stand_ins import config_only_checkpoint

# Which runner a task gets, V1 or MRV2: a choice the bases from 0.34.0 no longer make (V1 is
# gone; every task runs on MRV2 or is refused by upstream's VllmConfig._validate_model_runner).
pytestmark = pytest.mark.line("0.26.0", "0.32.0")

# The 0.26.0 line's rule (its patch 0011): MRV2 serves token-level tasks for encoder-only models
# only. Upstream's pooling runner serves decoders' token-level tasks from 0.28.0.
ONLY_ENCODERS_TOKEN_TASKS = pytest.mark.line("0.26.0")
# Upstream's rule from 0.28.0 (the 0.32.0 line's base): MRV2 serves decoders' token-level tasks.
DECODERS_TOKEN_TASKS = pytest.mark.line("0.32.0")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("selection-by-task")
    return {
        "reward": config_only_checkpoint(root / "reward", "Qwen2ForRewardModel"),
        "process_reward": config_only_checkpoint(root / "prm", "Qwen2ForProcessRewardModel"),
        "embedder": config_only_checkpoint(root / "embedder", "Qwen2Model"),
        # jinaai/jina-reranker-v3: a Qwen3 decoder whose pooler offers token_embed
        # only (late interaction, SupportsLateInteraction)
        "late_interaction": config_only_checkpoint(root / "jina-ranking", "JinaForRanking", "Qwen3Config",
                                                   head_dim=64),
    }


TOKEN_LEVEL_ONLY = [("reward", "token_classify"), ("process_reward", "token_classify"),
                    ("late_interaction", "token_embed")]


@ONLY_ENCODERS_TOKEN_TASKS
@pytest.mark.parametrize(("name", "task"), TOKEN_LEVEL_ONLY)
def test_token_level_only_architectures_keep_v1_by_default(real_config, checkpoints,
                                                           vllm_config_log, name, task):
    config = real_config(checkpoints[name], "pooling")
    assert config.model_config.attn_type == "decoder"
    assert config.use_v2_model_runner is False
    (line,) = [m for m in vllm_config_log if "Model Runner V2 does not yet support" in m]
    assert f"only pooling tasks are ['{task}']" in line and "V1 model runner" in line


@ONLY_ENCODERS_TOKEN_TASKS
@pytest.mark.parametrize(("name", "task"), TOKEN_LEVEL_ONLY)
def test_forcing_mrv2_on_token_level_only_architecture_fails_at_startup(real_config, checkpoints, name, task):
    with pytest.raises(ValueError) as e:
        real_config(checkpoints[name], "pooling", env="1")
    message = str(e.value)
    assert "Model Runner V2 does not yet support" in message and f"['{task}']" in message
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in message


@ONLY_ENCODERS_TOKEN_TASKS
@pytest.mark.parametrize("task", ["token_embed", "token_classify"])
def test_decoder_configured_for_a_token_task_keeps_v1(real_config, tiny_qwen3, vllm_config_log, task):
    config = real_config(tiny_qwen3, "pooling", pooler_config={"task": task})
    assert config.use_v2_model_runner is False
    (line,) = [m for m in vllm_config_log if "Model Runner V2 does not yet support" in m]
    assert f"the configured pooling task '{task}'" in line
    with pytest.raises(ValueError, match=f"'{task}'.*VLLM_USE_V2_MODEL_RUNNER=0"):
        real_config(tiny_qwen3, "pooling", env="1", pooler_config={"task": task})


@DECODERS_TOKEN_TASKS
@pytest.mark.parametrize("triton", [True, False], ids=["triton", "without-triton"])
@pytest.mark.parametrize(("name", "task"), TOKEN_LEVEL_ONLY)
def test_token_level_only_architectures_run_on_mrv2(real_config, checkpoints, vllm_config_log, triton, name, task):
    """A decoder whose only pooling task is token-level runs on MRV2 by
    default, without a warning, and forcing MRV2 is no error."""
    config = real_config(checkpoints[name], "pooling", triton=triton)
    assert config.model_config.attn_type == "decoder"
    assert config.use_v2_model_runner is True
    assert not [m for m in vllm_config_log if "V1 model runner" in m]
    assert real_config(checkpoints[name], "pooling", triton=triton, env="1").use_v2_model_runner is True


@DECODERS_TOKEN_TASKS
@pytest.mark.parametrize("triton", [True, False], ids=["triton", "without-triton"])
@pytest.mark.parametrize("task", ["token_embed", "token_classify"])
def test_decoder_configured_for_a_token_task_runs_on_mrv2(real_config, tiny_qwen3, vllm_config_log, triton, task):
    config = real_config(tiny_qwen3, "pooling", triton=triton, pooler_config={"task": task})
    assert config.use_v2_model_runner is True
    assert not [m for m in vllm_config_log if "V1 model runner" in m]
    assert real_config(tiny_qwen3, "pooling", triton=triton, env="1",
                       pooler_config={"task": task}).use_v2_model_runner is True


def test_models_whose_tasks_mrv2_serves_still_default_to_mrv2(real_config, minilm, tiny_qwen3, checkpoints):
    """On both lines: decoders asked for embed (their default task),
    encoder-only models asked for a token task."""
    assert real_config(tiny_qwen3, "pooling").use_v2_model_runner is True
    assert real_config(checkpoints["embedder"], "pooling").use_v2_model_runner is True
    assert real_config(tiny_qwen3, "pooling", pooler_config={"task": "embed"}).use_v2_model_runner is True
    assert real_config(minilm, "pooling", pooler_config={"task": "token_embed"}).use_v2_model_runner is True


def test_encoder_only_model_with_chunked_prefill_and_prefix_caching_flags_selects_mrv2(real_config, minilm):
    """The flags set explicitly do not keep an encoder-only model off MRV2:
    the engine turns chunked prefill off for a model without KV-cache groups,
    and prefix caching has nothing to cache (patch 0002)."""
    config = real_config(minilm, "pooling", enable_chunked_prefill=True, enable_prefix_caching=True)
    assert config.use_v2_model_runner is True
    assert real_config(minilm, "pooling", env="1", enable_chunked_prefill=True).use_v2_model_runner is True


# 0011's selection reads its rule from vllm.tasks; the 0.32.0 line's 0008 reads the served tasks
# from MRV2's pooling runner module (without Triton, for a configured task), and sends the
# reward model to MRV2 (upstream's rule from 0.28.0).
@ONLY_ENCODERS_TOKEN_TASKS
def test_selecting_the_runner_imports_no_mrv2_worker_module(checkpoints, minilm):
    """The selection by pooling task reads the rule both sides share
    (``vllm.tasks.model_runner_v2_pooling_tasks``) and what the model config
    declares: building the engine config and asking for the runner, for a
    model kept on V1 and one sent to MRV2, imports none of MRV2's worker
    modules (``vllm.v1.worker.gpu``), whose ``PoolingRunner`` applies the
    same rule. A fresh interpreter, so that nothing else imported them first."""
    import json
    import os
    import subprocess
    import sys

    from scripts.series.base import REPO

    code = (
        "import json, sys\n"
        "from vllm.engine.arg_utils import EngineArgs\n"
        "runners = [EngineArgs(model=m, runner='pooling', **kw).create_engine_config().use_v2_model_runner\n"
        "           for m, kw in ((sys.argv[1], {}), (sys.argv[2], {'pooler_config': {'task': 'token_embed'}}))]\n"
        "print(json.dumps({'runners': runners,\n"
        "                  'worker': sorted(m for m in sys.modules if m.startswith('vllm.v1.worker.gpu'))}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    proc = subprocess.run([sys.executable, "-c", code, checkpoints["reward"], minilm],
                          capture_output=True, text=True, env=env, cwd=str(REPO), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"runners": [False, True], "worker": []}
