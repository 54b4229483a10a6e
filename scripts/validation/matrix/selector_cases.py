"""Architectures vLLM's runner selection must keep off MRV2 on this machine,
checked without an engine: a small checkpoint is made, the engine config is
built and the selector asked (``scripts.validation.matrix.inventory.selector_verdict``). The
reason recorded in the inventory is the one the selector logs.

Each ``SelectorCase`` says what the selector must answer by default
(``want``), and why (``why``: the rule of ``vllm/config/vllm.py`` that
applies; the report shows the selector's own words next to it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from scripts.validation.checkpoints.zoo import make_hf
from scripts.validation.engine import base_runners
from scripts.validation.matrix.rows import REWARD_FAULT, SMALL_MOE
from scripts.validation.matrix.rows import case as matrix_case
from scripts.validation.matrix.rows import of_this_line


@dataclass(frozen=True)
class SelectorCase:
    """A checkpoint and the runner vLLM's selector must pick for it by default."""

    id: str
    family: str
    impl: str  # "module:Class" in the inventory
    architecture: str
    make: Callable
    why: str
    want: str = "V1"
    engine: dict = field(default_factory=dict)
    known_fault: str | None = None
    checkpoint: str | None = None  # directory shared with a matrix case (default: id)
    lines: tuple[str, ...] | None = None  # the lines whose selector has the rule (None: every line)


HYBRID = "hybrid model (attention + Mamba/conv state): VllmConfig._is_default_v2_model_runner_model is False"
MOE = "MoE model outside DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES: _is_default_v2_model_runner_model is False"
MROPE = ("M-RoPE needs MRV2's Triton positions kernel: no Triton here, so "
         "_v2_model_runner_runs_without_triton is False (V1 fallback, patch 0008)")
# Rules of the 0.26.0 base and series only: upstream made MRV2 the default for MoE models in
# 0.29.0 (_is_default_v2_model_runner_model removed) and serves a decoder's token tasks on
# MRV2 from 0.28.0 (0011 dropped onto 0.32.0), so later lines run these models on MRV2.
BASE_0_26 = ("0.26.0",)

SELECTOR_CASES: list[SelectorCase] = [
    SelectorCase("jamba-cls", "decoder classifiers/rerankers",
                 "jamba:JambaForSequenceClassification",
                 "JambaForSequenceClassification",
                 partial(make_hf, config_cls="JambaConfig", model_cls="JambaForSequenceClassification",
                         decoder=True, num_labels=3, num_experts=1, attn_layer_period=2, attn_layer_offset=1,
                         mamba_d_state=8, mamba_expand=1, pad_token_id=0, use_mamba_kernels=False),
                 HYBRID),
    SelectorCase("colbert-lfm2", "late interaction",
                 "colbert:ColBERTLfm2Model",
                 "ColBERTLfm2Model",
                 matrix_case("colbert-lfm2").make,
                 HYBRID + " (upstream keeps LFM2 ColBERT on V1 too)", checkpoint="colbert-lfm2"),
    SelectorCase("transformers-moe-embed", "transformers backend",
                 "transformers:TransformersMoEEmbeddingModel",
                 "Qwen3MoeModel",
                 partial(make_hf, config_cls="Qwen3MoeConfig", model_cls="Qwen3MoeModel", decoder=True,
                         **SMALL_MOE),
                 MOE, engine={"model_impl": "transformers"}, lines=BASE_0_26),
    SelectorCase("transformers-moe-cls", "transformers backend",
                 "transformers:TransformersMoEForSequenceClassification",
                 "Qwen3MoeForSequenceClassification",
                 partial(make_hf, config_cls="Qwen3MoeConfig", model_cls="Qwen3MoeForSequenceClassification",
                         decoder=True, num_labels=3, pad_token_id=0, **SMALL_MOE),
                 MOE, engine={"model_impl": "transformers"}, lines=BASE_0_26),
    SelectorCase("privacy-filter", "token classifiers",
                 "openai_privacy_filter:OpenAIPrivacyFilterForTokenClassification",
                 "OpenAIPrivacyFilterForTokenClassification",
                 partial(make_hf, config_cls="OpenAIPrivacyFilterConfig",
                         model_cls="OpenAIPrivacyFilterForTokenClassification", decoder=True, num_labels=3,
                         num_local_experts=4, num_experts_per_tok=2, pad_token_id=0),
                 MOE + " (GPT-OSS experts)", lines=BASE_0_26),
    SelectorCase("qwen2-rm-selection", "reward",
                 "qwen2_rm:Qwen2ForRewardModel",
                 "Qwen2ForRewardModel",
                 matrix_case("qwen2-rm").make,
                 "reward: MRV2 serves no token task of a decoder (PR 50574): the selector keeps it on V1",
                 known_fault=REWARD_FAULT, checkpoint="qwen2-rm", lines=BASE_0_26),
    SelectorCase("qwen2-prm-selection", "reward",
                 "qwen2_rm:Qwen2ForProcessRewardModel",
                 "Qwen2ForProcessRewardModel",
                 matrix_case("qwen2-prm").make,
                 "process reward (STEP pooling): MRV2 serves no token task of a decoder: kept on V1",
                 engine={"pooler_config": {"step_tag_id": 1012}}, known_fault=REWARD_FAULT,
                 checkpoint="qwen2-prm", lines=BASE_0_26),
]
# A base without V1 (from 0.34.0) has no selector keeping a model off MRV2: its cases are
# matrix rows there (rows.py), checked on MRV2.
SELECTOR_CASES = of_this_line(SELECTOR_CASES) if "V1" in base_runners() else []
