"""The validation matrix's rows, as data: one ``MatrixCase`` per (checkpoint,
engine options), each with the pooling tasks it is checked on. ``make
matrix`` (``scripts/validation/matrix/runner.py``) opens one engine per case and runner and
runs every task through it; the tests (``tests/e2e/test_matrix.py``) are
generated from the same cases (``smoke=True``: the family's row in ``make
test``).

A case names its architecture as ``config.json`` (or ``hf_overrides``)
does, so that ``scripts/validation/matrix/inventory.py`` can map it to the registry's
implementing class. ``default`` is the runner vLLM must pick when
``VLLM_USE_V2_MODEL_RUNNER`` is unset on a CPU without Triton: ``MRV2``,
or ``V1`` for models MRV2 cannot serve (then only that run is made).
"""


from __future__ import annotations

from functools import partial

from scripts.validation import references as ref
from scripts.validation.checkpoints.zoo import make_clip, make_custom, make_hf, make_tiny_colbert
from scripts.validation.checkpoints.zoo_published import make_gte, make_jina_colbert, make_nomic, make_siglip
from scripts.validation.matrix.tasks import (BPE, CLASSIFY, EMBED_CLS, EMBED_LAST, EMBED_MEAN, FAMILIES, MEAN,  # noqa: F401
                                             MINILM, SCORE, TOKEN_CLASSIFY, TOKEN_EMBED, TOKEN_TYPES, MatrixCase, T,
                                             Task, inputs, run_encode, run_mm_embed, run_siglip_text)


bert = partial(make_hf, config_cls="BertConfig", model_cls="BertModel", max_position_embeddings=512)
roberta = dict(tokenizer="bpe", pad_token_id=1, bos_token_id=0, eos_token_id=2,
               max_position_embeddings=514, type_vocab_size=1)
modernbert = dict(pad_token_id=0, bos_token_id=101, eos_token_id=102, cls_token_id=101, sep_token_id=102,
                  global_attn_every_n_layers=2, local_attention=8, max_position_embeddings=512)


def decoder(config_cls, model_cls, **kw):
    """A maker of a decoder checkpoint (``zoo.make_hf`` with the decoder sizes)."""
    return partial(make_hf, config_cls=config_cls, model_cls=model_cls, decoder=True, **kw)


DECODERS = {  # id: (registry name, maker)
    "qwen2": ("Qwen2ForCausalLM", decoder("Qwen2Config", "Qwen2ForCausalLM")),
    "qwen3": ("Qwen3ForCausalLM", decoder("Qwen3Config", "Qwen3ForCausalLM")),
    "llama": ("LlamaModel", decoder("LlamaConfig", "LlamaModel")),
    "mistral": ("MistralModel", decoder("MistralConfig", "MistralModel", sliding_window=4096)),
    # Gemma ties its embeddings in every published checkpoint (vLLM's Gemma2 asserts it)
    "gemma2": ("Gemma2Model", decoder("Gemma2Config", "Gemma2Model", sliding_window=8,
                                      query_pre_attn_scalar=64, tie_word_embeddings=True)),
    "gemma3": ("Gemma3TextModel", decoder("Gemma3TextConfig", "Gemma3TextModel", sliding_window=8,
                                          query_pre_attn_scalar=64, tie_word_embeddings=True,
                                          layer_types=["sliding_attention", "full_attention"])),
}
MORE_DECODERS = {  # last-token rows only
    "phi3": ("Phi3ForCausalLM", decoder("Phi3Config", "Phi3ForCausalLM", pad_token_id=0)),
    "glm": ("GlmForCausalLM", decoder("GlmConfig", "GlmForCausalLM", pad_token_id=0)),
}
# vLLM's own GLM (glm.py) is gone from the registry after 0.26.0: later releases serve
# GlmForCausalLM through the Transformers backend only (its family has its own row).
DECODER_LINES = {"glm": ("0.26.0",)}
LATER_LINES = ("0.32.0", "0.34.0")  # the lines after 0.26.0
SMALL_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64)
# DeepSeek-V3 (MLA layout: q and kv LoRA projections; heads of 32 + 32 rotary = 64, values of 64), its
# published MoE routing (sigmoid scores, noaux_tc, groups) at small sizes; head_dim is the rotary part
DEEPSEEK_V3 = dict(num_key_value_heads=2, head_dim=32, q_lora_rank=64, kv_lora_rank=64, qk_nope_head_dim=32,
                   qk_rope_head_dim=32, v_head_dim=64, n_routed_experts=4, num_experts_per_tok=2, n_group=2,
                   topk_group=1, n_shared_experts=1, moe_intermediate_size=64, first_k_dense_replace=1,
                   topk_method="noaux_tc", scoring_func="sigmoid")

RM_HEAD = {"score.0.weight": (128, 128), "score.0.bias": (128,), "score.2.weight": (1, 128),
           "score.2.bias": (1,)}
PRM_HEAD = {**RM_HEAD, "score.2.weight": (2, 128), "score.2.bias": (2,)}
STEP = {"step_tag_id": 1012, "returned_token_ids": [1, 0]}  # "." in MiniLM's vocabulary
RERANKER = {"architectures": ["Qwen3ForSequenceClassification"], "classifier_from_token": ["no", "yes"],
            "is_original_qwen3_reranker": True}
BGE_M3_FILES = {"sparse_linear.pt": {"weight": (1, 128), "bias": (1,)},
                "colbert_linear.pt": {"weight": (128, 128), "bias": (128,)}}
REWARD_FAULT = "MRV2 serves none of its pooling tasks: the selector must keep it on V1 (fault 2)"
# Reward models: the 0.26.0 line keeps them on V1 (patch 0011: MRV2 there serves token-level
# tasks for encoder-only models only); from 0.28.0 upstream's pooling runner serves them on MRV2.
REWARD_DEFAULT = {"0.26.0": "V1", "0.32.0": "MRV2", "0.34.0": "MRV2"}
GTE = partial(ref.embed, config_cls="GteConfig")  # new-impl's NewConfig is transformers' GteConfig
JINA = {"config_cls": "JinaEmbeddingsV3Config"}  # XLMRobertaFlashConfig: transformers' Jina-v3 port
# base defects (V1 too), both on the CPU: (1) with AMX, vllm/model_executor/layers/utils.py packed every
# conv weight for ops.causal_conv1d_weight_pack, which takes width 4 only (LFM2's conv_L_cache is 3):
# load failed; patch 0018. (2) RotaryEmbedding.forward_cpu handed LFM2's per-head query
# [tokens, heads, head_dim] to the CPU kernel, which reads one row per token: heads rotated at wrong
# positions, attention wrong from the first attention layer (conv layer 0 matched transformers exactly,
# layer 1's query did not): max abs error 0.317; patch 0019
LFM2_FAULT = ("base, CPU: (1) on AMX the width-3 conv weight was packed for a width-4 kernel: load failed "
              "('support only width of 4'), patch 0018; (2) RotaryEmbedding.forward_cpu rotated LFM2's per-head "
              "query [tokens, heads, head_dim] at wrong positions (max abs error 0.317), patch 0019")
REMOTE = {"trust_remote_code": True}  # the config class in the checkpoint directory (local file)
LFM2_COLBERT = partial(make_custom, config_cls="Lfm2Config", backbone_cls="Lfm2Model", decoder=True,
                      architectures=["ColBERTLfm2Model"], heads={"linear.weight": (32, 128)},
                      # published LFM2 configs carry conv_dim / block_dim (transformers 5's Lfm2Config does not)
                      config_attrs={"dim": 32, "conv_dim": 128, "conv_dim_out": 128, "block_dim": 128},
                      layer_types=["conv", "full_attention"],
                      block_auto_adjust_ff_dim=False, block_ff_dim=256)
SIGLIP_TEXT = T("embed", ref.siglip, run_siglip_text, inputs="short texts")

CASES: list[MatrixCase] = [
    # --- encoders
    MatrixCase("bert-cls", "encoders", "BertModel", bert, (EMBED_CLS, TOKEN_EMBED), MINILM + ", CLS pooling",
               checkpoint="bert", smoke=True),
    MatrixCase("bert-mean", "encoders", "BertModel", bert, (EMBED_MEAN,), MINILM + ", pooler MEAN",
               engine=MEAN, checkpoint="bert"),
    MatrixCase("roberta", "encoders", "RobertaModel", partial(make_hf, config_cls="RobertaConfig",
               model_cls="RobertaModel", **roberta), (EMBED_CLS, TOKEN_EMBED),
               BPE + ", positions from padding_idx+1"),
    MatrixCase("xlm-roberta", "encoders", "XLMRobertaModel", partial(make_hf, config_cls="XLMRobertaConfig",
               model_cls="XLMRobertaModel", **roberta), (EMBED_CLS, TOKEN_EMBED),
               BPE + ", positions from padding_idx+1"),
    MatrixCase("modernbert", "encoders", "ModernBertModel", partial(make_hf, config_cls="ModernBertConfig",
               model_cls="ModernBertModel", **modernbert), (EMBED_CLS, TOKEN_EMBED),
               MINILM + ", global layer 0, local layer 1 (window 8)"),
    MatrixCase("bert-mlm", "encoders", "BertForMaskedLM", partial(make_hf, config_cls="BertConfig",
               model_cls="BertForMaskedLM"),
               (T("token_classify", ref.mlm_logits, run_encode("token_classify", use_activation=False)),),
               MINILM + ", raw logits (use_activation=False: a softmax over 30,522 hides errors)"),
    MatrixCase("nomic", "encoders", "NomicBertModel", make_nomic, (EMBED_CLS, TOKEN_EMBED),
               MINILM + ", rotary (base 1000), SwiGLU; nomic-bert-2048 config fields"),
    MatrixCase("gte", "encoders", "GteModel", make_gte, (EMBED_CLS, TOKEN_EMBED),
               MINILM + ", rotary, gated GELU (Snowflake arctic-embed v2 layout, transformers' GteConfig)"),
    MatrixCase("gte-new", "encoders", "GteNewModel", partial(make_gte, architecture="GteNewModel"),
               (T("embed", GTE), T("token_embed", partial(ref.token_embed, config_cls="GteConfig"))),
               MINILM + ", new-impl layout, local NewConfig (trust_remote_code)", engine=REMOTE),
    # --- cross-encoders
    MatrixCase("gte-new-cross", "cross-encoders", "GteNewForSequenceClassification", partial(
               make_gte, architecture="GteNewForSequenceClassification", num_labels=1, tokenizer="bpe"),
               (T("score", partial(ref.cross_encoder_score, config_cls="GteConfig")),),
               BPE + "; gte-multilingual-reranker layout (new.*, pooler, classifier), local NewConfig",
               engine=REMOTE),
    MatrixCase("bert-cross", "cross-encoders", "BertForSequenceClassification", partial(
               make_hf, config_cls="BertConfig", model_cls="BertForSequenceClassification", num_labels=1),
               (SCORE, CLASSIFY), MINILM + TOKEN_TYPES, smoke=True,
               known_fault="MRV2 drops the token type ids of PoolingParams.extra_kwargs (fault 1)"),
    MatrixCase("xlmr-cross", "cross-encoders", "XLMRobertaForSequenceClassification", partial(
               make_hf, config_cls="XLMRobertaConfig", model_cls="XLMRobertaForSequenceClassification",
               num_labels=1, **roberta), (SCORE, CLASSIFY), BPE + " (bge-reranker style)"),
    MatrixCase("modernbert-cross", "cross-encoders", "ModernBertForSequenceClassification", partial(
               make_hf, config_cls="ModernBertConfig", model_cls="ModernBertForSequenceClassification",
               num_labels=1, classifier_pooling="mean", **modernbert), (SCORE, CLASSIFY),
               MINILM + ", mean classifier pooling, local window 8"),
    MatrixCase("gpt2-cls", "cross-encoders", "GPT2ForSequenceClassification", partial(
               make_hf, config_cls="GPT2Config", model_cls="GPT2ForSequenceClassification", num_labels=3,
               n_positions=512, pad_token_id=0), (CLASSIFY,), MINILM + ", last token"),
    # --- token classifiers
    MatrixCase("bert-token-cls", "token classifiers", "BertForTokenClassification", partial(
               make_hf, config_cls="BertConfig", model_cls="BertForTokenClassification", num_labels=3),
               (TOKEN_CLASSIFY,), MINILM, smoke=True),
    MatrixCase("modernbert-token-cls", "token classifiers", "ModernBertForTokenClassification", partial(
               make_hf, config_cls="ModernBertConfig", model_cls="ModernBertForTokenClassification",
               num_labels=3, **modernbert), (TOKEN_CLASSIFY,), MINILM + ", local window 8"),
    MatrixCase("xlmr-token-cls", "token classifiers", "XLMRobertaForTokenClassification", partial(
               make_hf, config_cls="XLMRobertaConfig", model_cls="XLMRobertaForTokenClassification",
               num_labels=3, **roberta), (TOKEN_CLASSIFY,), BPE),
    # --- decoder embedders: last token (the default) and mean pooling
    *[MatrixCase(f"{k}-last", "decoder embedders", arch, make, (EMBED_LAST,), MINILM + ", last token",
                 checkpoint=k, smoke=k == "qwen3", lines=DECODER_LINES.get(k))
      for k, (arch, make) in {**DECODERS, **MORE_DECODERS}.items()],
    *[MatrixCase(f"{k}-mean", "decoder embedders", arch, make, (EMBED_MEAN,), MINILM + ", pooler MEAN",
                 engine=MEAN, checkpoint=k) for k, (arch, make) in DECODERS.items()],
    MatrixCase("llama-bidirectional", "decoder embedders", "LlamaBidirectionalModel", decoder(
               "LlamaConfig", "LlamaModel", architectures=["LlamaBidirectionalModel"], pooling="avg"),
               (T("embed", partial(ref.embed, pooling="MEAN", bidirectional=True)),),
               MINILM + ", bidirectional attention, pooling avg"),
    MatrixCase("deepseek-v3-bidirectional", "decoder embedders", "DeepseekV3BidirectionalModel", decoder(
               "DeepseekV3Config", "DeepseekV3Model", architectures=["DeepseekV3BidirectionalModel"], is_causal=False,
               **DEEPSEEK_V3), (T("embed", partial(ref.embed, pooling="LAST", bidirectional=True)),
                                T("token_embed", partial(ref.token_embed, bidirectional=True))),
               MINILM + ", bidirectional (is_causal false: vLLM's non-MLA attention path), q/kv LoRA ranks 64, "
               "layer 0 dense, layer 1 MoE (4 routed experts, 2 per token, sigmoid noaux_tc, 1 shared), last token",
               lines=LATER_LINES),
    # --- decoder classifiers and rerankers
    MatrixCase("qwen3-seq-cls", "decoder classifiers/rerankers", "Qwen3ForSequenceClassification", decoder(
               "Qwen3Config", "Qwen3ForSequenceClassification", num_labels=3, pad_token_id=0), (CLASSIFY,),
               MINILM + ", last token", smoke=True),
    MatrixCase("qwen3-reranker", "decoder classifiers/rerankers", "Qwen3ForSequenceClassification",
               DECODERS["qwen3"][1], (T("classify", ref.qwen3_reranker),),
               MINILM + "; hf_overrides classifier_from_token [no, yes], is_original_qwen3_reranker",
               engine={"hf_overrides": RERANKER}, checkpoint="qwen3"),
    MatrixCase("llama-bidirectional-cls", "decoder classifiers/rerankers",
               "LlamaBidirectionalForSequenceClassification", decoder(
                   "LlamaConfig", "LlamaForSequenceClassification", num_labels=1, pad_token_id=0, pooling="avg",
                   architectures=["LlamaBidirectionalForSequenceClassification"]),
               (T("classify", ref.bidirectional_classify),), MINILM + ", bidirectional, mean pooling"),
    # --- reward
    MatrixCase("qwen2-rm", "reward", "Qwen2ForRewardModel", partial(
               make_custom, config_cls="Qwen2Config", backbone_cls="Qwen2Model", decoder=True,
               architectures=["Qwen2ForRewardModel"], prefix="model.", heads=RM_HEAD),
               (T("token_classify", partial(ref.reward, use_activation=False)),),
               MINILM + ", reward per token, raw scores (use_activation off by default)", default=REWARD_DEFAULT,
               smoke=True, known_fault=REWARD_FAULT),
    MatrixCase("qwen2-prm", "reward", "Qwen2ForProcessRewardModel", partial(
               make_custom, config_cls="Qwen2Config", backbone_cls="Qwen2Model", decoder=True,
               architectures=["Qwen2ForProcessRewardModel"], prefix="model.", heads=PRM_HEAD),
               (T("token_classify", partial(ref.reward, **STEP)),),
               MINILM + ", STEP pooling: step_tag_id 1012 ('.'), returned_token_ids [1, 0]",
               engine={"pooler_config": dict(STEP)}, default=REWARD_DEFAULT, known_fault=REWARD_FAULT),
    # --- sparse
    MatrixCase("splade", "sparse", "BertSpladeSparseEmbeddingModel", partial(
               make_hf, config_cls="BertConfig", model_cls="BertForMaskedLM",
               architectures=["BertSpladeSparseEmbeddingModel"]), (T("embed", ref.splade),),
               MINILM + ", SPLADE max pooling", smoke=True),
    MatrixCase("bge-m3", "sparse", "BgeM3EmbeddingModel", partial(
               make_custom, config_cls="XLMRobertaConfig", backbone_cls="XLMRobertaModel",
               architectures=["BgeM3EmbeddingModel"], extra_files=BGE_M3_FILES, **roberta),
               (T("embed", partial(ref.bgem3, part="dense")), T("token_classify", partial(ref.bgem3, part="sparse")),
                T("token_embed", partial(ref.bgem3, part="colbert")),
                T("embed&token_classify", partial(ref.bgem3, part="dense+sparse"))),
               BPE + ", sparse_linear.pt and colbert_linear.pt"),
    # --- late interaction
    MatrixCase("colbert-bert", "late interaction", "HF_ColBERT", make_tiny_colbert,
               (T("score", ref.late_interaction_score), T("token_embed", ref.colbert_tokens)),
               MINILM + ", projection to 32", smoke=True),
    MatrixCase("colbert-modernbert", "late interaction", "ColBERTModernBertModel",
               partial(make_tiny_colbert, backbone="modernbert"),
               (T("score", ref.late_interaction_score), T("token_embed", ref.colbert_tokens)),
               MINILM + ", projection to 32"),
    MatrixCase("colbert-jina", "late interaction", "ColBERTJinaRobertaModel", make_jina_colbert,
               (T("score", partial(ref.late_interaction_score, **JINA)),
                T("token_embed", partial(ref.colbert_tokens, **JINA))),
               BPE + ", rotary XLM-R (base 20000), projection to 32, local XLMRobertaFlashConfig", engine=REMOTE),
    MatrixCase("colbert-lfm2", "late interaction", "ColBERTLfm2Model", LFM2_COLBERT,
               (T("score", ref.late_interaction_score), T("token_embed", ref.colbert_tokens)),
               MINILM + ", LFM2 (conv layer 0, attention layer 1), projection to 32", default="V1",
               known_fault=LFM2_FAULT),
    # --- multimodal
    MatrixCase("siglip", "multimodal", "SiglipModel", make_siglip,
               (SIGLIP_TEXT, T("embed (image)", ref.siglip, run_mm_embed, inputs="images")),
               "text padded to 64 (SentencePiece SiglipTokenizer trained locally) and 32x32 images "
               "(SiglipImageProcessor)", engine={"max_model_len": 64}),
    MatrixCase("clip", "multimodal", "CLIPModel", make_clip,
               (T("embed", ref.clip, inputs="short texts"),
                T("embed (image)", ref.clip, run_mm_embed, inputs="images")),
               "text (character-level CLIP tokenizer built locally) and 32x32 images (CLIPImageProcessor)",
               engine={"max_model_len": 77}, smoke=True),
    # --- the Transformers modeling backend
    MatrixCase("transformers-embed", "transformers backend", "TransformersEmbeddingModel", bert, (EMBED_CLS,),
               MINILM + ", model_impl=transformers", engine={"model_impl": "transformers"}, checkpoint="bert",
               smoke=True),
    MatrixCase("transformers-cls", "transformers backend", "TransformersForSequenceClassification",
               decoder("Qwen3Config", "Qwen3ForSequenceClassification", num_labels=3, pad_token_id=0), (CLASSIFY,),
               MINILM + ", model_impl=transformers", engine={"model_impl": "transformers"},
               checkpoint="qwen3-seq-cls"),
    # MoE models: on MRV2 by default from 0.29.0 (the 0.26.0 line keeps them on V1: its
    # selector cases in scripts/validation/matrix/selector_cases.py)
    MatrixCase("transformers-moe-embed", "transformers backend", "TransformersMoEEmbeddingModel",
               decoder("Qwen3MoeConfig", "Qwen3MoeModel", **SMALL_MOE), (EMBED_LAST,),
               MINILM + ", model_impl=transformers, 4 experts (2 per token), last token",
               engine={"model_impl": "transformers"}, lines=LATER_LINES),
    MatrixCase("transformers-moe-cls", "transformers backend", "TransformersMoEForSequenceClassification",
               decoder("Qwen3MoeConfig", "Qwen3MoeForSequenceClassification", num_labels=3, pad_token_id=0,
                       **SMALL_MOE), (CLASSIFY,),
               MINILM + ", model_impl=transformers, 4 experts (2 per token)", engine={"model_impl": "transformers"},
               lines=LATER_LINES),
    # --- mixture of experts, vLLM's own implementations (fused MoE on the CPU): MRV2 by default
    # on the lines after 0.26.0 (issue 38 item 5), checked against transformers
    MatrixCase("qwen3-moe-last", "mixture of experts", "Qwen3MoeForCausalLM",
               decoder("Qwen3MoeConfig", "Qwen3MoeForCausalLM", **SMALL_MOE), (EMBED_LAST,),
               MINILM + ", 4 experts (2 per token, softmax top-k), last token", smoke=True, lines=LATER_LINES),
    MatrixCase("qwen2-moe-last", "mixture of experts", "Qwen2MoeForCausalLM",
               decoder("Qwen2MoeConfig", "Qwen2MoeForCausalLM", shared_expert_intermediate_size=64, **SMALL_MOE),
               (EMBED_LAST,), MINILM + ", 4 experts (2 per token) and a gated shared expert, last token",
               lines=LATER_LINES),
    MatrixCase("mixtral-last", "mixture of experts", "MixtralForCausalLM",
               decoder("MixtralConfig", "MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2,
                       intermediate_size=64), (EMBED_LAST,), MINILM + ", 4 experts (2 per token), last token",
               lines=LATER_LINES),
    MatrixCase("qwen3-moe-seq-cls", "mixture of experts", "Qwen3MoeForSequenceClassification",
               decoder("Qwen3MoeConfig", "Qwen3MoeForSequenceClassification", num_labels=3, pad_token_id=0,
                       **SMALL_MOE), (CLASSIFY,), MINILM + ", 4 experts (2 per token), last token",
               lines=LATER_LINES),
    # A hybrid (Mamba + attention) classifier: kept on V1 where the base has it (selector case
    # jamba-cls), on MRV2 where the base has no V1 (from 0.34.0). Its Mamba layer's prefill needs
    # selective_scan_fwd, which vLLM builds for GPUs and XPUs only: refused on the CPU (0068).
    MatrixCase("jamba-cls", "decoder classifiers/rerankers", "JambaForSequenceClassification",
               decoder("JambaConfig", "JambaForSequenceClassification", num_labels=3, num_experts=1,
                       attn_layer_period=2, attn_layer_offset=1, mamba_d_state=8, mamba_expand=1, pad_token_id=0,
                       use_mamba_kernels=False), (CLASSIFY,),
               MINILM + ", Mamba layer 0, attention layer 1, last token", default="V1",
               refused="JambaForSequenceClassification has Mamba (selective state space) layers "
                       "(model.layers.0.mixer), whose prefill needs vLLM's selective_scan_fwd kernel"),
    MatrixCase("privacy-filter", "token classifiers", "OpenAIPrivacyFilterForTokenClassification",
               decoder("OpenAIPrivacyFilterConfig", "OpenAIPrivacyFilterForTokenClassification", num_labels=3,
                       num_local_experts=4, num_experts_per_tok=2, pad_token_id=0), (TOKEN_CLASSIFY,),
               MINILM + ", GPT-OSS experts (4, 2 per token)", lines=LATER_LINES),
]


def of_this_line(items: list) -> list:
    """The items (cases, selector cases: anything with ``lines``) of the line under
    test (``scripts.series.lines.get_line``): those whose ``lines`` is None or names it."""
    from scripts.series.lines import get_line

    line = get_line().name
    return [c for c in items if c.lines is None or line in c.lines]


CASES = of_this_line(CASES)


def case(case_id: str) -> MatrixCase:
    """The case named ``case_id``; ``KeyError`` names the known ones."""
    for c in CASES:
        if c.id == case_id:
            return c
    raise KeyError(f"no case {case_id!r}; cases: {', '.join(c.id for c in CASES)}")
