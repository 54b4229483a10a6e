"""Small random-weight checkpoints of the pooling architectures whose
published checkpoints need remote code, made here in the published layout
(the one vLLM's loaders read), all local, with the factory's
``build_checkpoint`` and ``random_model`` (``scripts/validation/checkpoints/zoo.py``),
at its sizes (2 layers, hidden 128, heads of 64).

transformers 5 ships its own ports of these models (``NomicBertModel``,
``GteModel``, ``JinaEmbeddingsV3Model``, ``SiglipModel``), and its
``save_pretrained`` writes the *published* weight names (its conversion
mapping runs backwards on save): those ports serve both to make the
checkpoints and as the matrix's references. What differs is the config:
vLLM's ``vllm/model_executor/models/config.py`` checks the config class by
name and reads the remote-code field names:

- ``NomicBertModel``: a ``NomicBertConfig`` (transformers' own has that
  name) carrying nomic-bert-2048's fields (``activation_function``,
  ``n_embd``, ``n_inner``, ``n_layer``, ``layer_norm_epsilon``,
  ``qkv_proj_bias``, ...) beside transformers' ones;
- ``GteModel`` (Snowflake arctic-embed v2): transformers' ``GteConfig``;
- ``GteNewModel`` / ``GteNewForSequenceClassification`` (Alibaba-NLP
  new-impl): a config class named ``NewConfig``: a four-line module in the
  checkpoint (``configuration_new.py``, ``auto_map``), opened with
  ``trust_remote_code=True``, from the local directory;
- ``ColBERTJinaRobertaModel`` (jina-colbert-v2): a config class named
  ``XLMRobertaFlashConfig`` with ``position_embedding_type="rotary"`` and
  ``rotary_emb_base``, the same way; weights under ``roberta.``, ColBERT's
  ``linear`` beside them;
- ``SiglipEmbeddingModel``: transformers' ``SiglipConfig``, with a
  ``SiglipProcessor`` whose SentencePiece tokenizer is trained here on the
  STS-B sentences;
- ``JinaForRanking`` (jina-reranker-v3): a Qwen3 backbone under ``model.``
  and its two-layer ``projector``, transformers' ``Qwen3Config`` (published
  with remote modeling code; no transformers class computes its scores, so
  it serves tests of vLLM's own scoring paths, not the matrix). vLLM's pooler
  finds the documents and the query by Qwen's token ids 151670
  (``<|embed_token|>``) and 151671 (``<|rerank_token|>``): the tokenizer is
  MiniLM's WordPiece with its vocabulary padded by unused tokens up to
  151,670 and those two tokens added there (``jina_ranking_tokenizer``).
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts.validation.checkpoints.models import MINILM_VOCAB, TINY, atomic_dir, minilm_path, sts_test
from scripts.validation.checkpoints.zoo import build_checkpoint, random_model, save_model_and_processor, vocab

GELU_BERT = dict(TINY, max_position_embeddings=512)
# nomic-bert-2048's configuration_hf_nomic_bert.py field names, as vLLM's NomicBertModelConfig reads them
NOMIC_FIELDS = dict(activation_function="swiglu", n_embd=TINY["hidden_size"], n_inner=TINY["intermediate_size"],
                    n_layer=TINY["num_hidden_layers"], n_head=TINY["num_attention_heads"], n_positions=512,
                    layer_norm_epsilon=1e-12, qkv_proj_bias=False, mlp_fc1_bias=False, mlp_fc2_bias=False,
                    rotary_emb_base=1000, rotary_emb_fraction=1.0, rotary_emb_scale_base=None,
                    rotary_emb_interleaved=False, prenorm=False, causal=False)
LOCAL_CONFIG = '''"""{doc}"""
from transformers.models.{module} import {base}


class {name}({base}):
    model_type = "{model_type}"
'''


def _edit_config(tmp: Path, **fields) -> None:
    cfg = json.loads((tmp / "config.json").read_text())
    cfg.update(fields)
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2))


def _rename(tmp: Path, rename) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(tmp / "model.safetensors"))
    save_file({rename(k): v for k, v in weights.items()}, str(tmp / "model.safetensors"))


def _local_config_class(tmp: Path, name: str, base_module: str, base: str, model_type: str, doc: str) -> None:
    """A config class ``name`` (subclass of transformers' ``base``) in the
    checkpoint, mapped by ``auto_map`` (loaded with ``trust_remote_code``)."""
    module = f"configuration_{model_type.replace('-', '_')}"
    (tmp / f"{module}.py").write_text(LOCAL_CONFIG.format(
        doc=doc, module=base_module, base=base, name=name, model_type=model_type))
    _edit_config(tmp, model_type=model_type, auto_map={"AutoConfig": f"{module}.{name}"})


def make_nomic(dest: Path, seed: int = 0) -> Path:
    """transformers' ``NomicBertModel`` (SwiGLU, rotary base 1000, no biases),
    saved in nomic-bert-2048's layout (``encoder.layers.N.attn.Wqkv``,
    ``mlp.fc11``/``fc12``/``fc2``, ``emb_ln``), config with both field sets."""
    def write(tmp: Path) -> None:
        model = random_model("NomicBertConfig", "NomicBertModel", seed, dict(TINY, vocab_size=MINILM_VOCAB,
                       max_position_embeddings=512))
        model.save_pretrained(tmp)
        _edit_config(tmp, architectures=["NomicBertModel"], **NOMIC_FIELDS)

    return build_checkpoint(dest, write, "minilm")


def make_gte(dest: Path, architecture: str = "GteModel", num_labels: int | None = None, tokenizer: str = "minilm",
             seed: int = 0) -> Path:
    """transformers' ``GteModel`` (``GteForSequenceClassification`` with
    ``num_labels``) saved in the published new-impl layout
    (``encoder.layer.N.attention.qkv_proj``, ``mlp.up_gate_proj``; the
    classifier's backbone under ``new.``). ``architecture``: ``GteModel``
    (Snowflake arctic-embed v2, transformers' ``GteConfig``) or
    ``GteNewModel`` / ``GteNewForSequenceClassification`` (new-impl: a local
    ``NewConfig``). ``tokenizer``: ``minilm`` (BERT's, token types 2, as
    gte-*-en-v1.5) or ``bpe`` (XLM-R style, no token types, as
    gte-multilingual-*)."""
    def write(tmp: Path) -> None:
        bert_like = tokenizer == "minilm"
        config = dict(TINY, vocab_size=vocab(tokenizer), max_position_embeddings=512,
                      type_vocab_size=2 if bert_like else 1, pad_token_id=0 if bert_like else 1,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
        if num_labels:
            config["num_labels"] = num_labels
        model_cls = "GteForSequenceClassification" if num_labels else "GteModel"
        random_model("GteConfig", model_cls, seed, config).save_pretrained(tmp)
        if num_labels:  # new-impl's NewForSequenceClassification keeps its backbone under "new."
            _rename(tmp, lambda k: "new." + k[4:] if k.startswith("gte.") else k)
        # published new-impl / arctic-embed configs carry it (transformers' GteConfig does not define it)
        _edit_config(tmp, architectures=[architecture], position_embedding_type="rope")
        if architecture != "GteModel":
            _local_config_class(tmp, "NewConfig", "gte", "GteConfig", "new",
                                "Alibaba-NLP/new-impl's config class name, on transformers' GteConfig.")

    return build_checkpoint(dest, write, tokenizer)


def make_jina_colbert(dest: Path, dim: int = 32, seed: int = 0) -> Path:
    """jina-colbert-v2's layout: transformers' ``JinaEmbeddingsV3Model``
    (rotary XLM-R, base 20000; no LoRA adapters, as jina-colbert-v2 has none)
    under ``roberta.`` plus a bias-free ``linear`` projection to ``dim``; a
    local ``XLMRobertaFlashConfig``; RoBERTa-style BPE tokenizer."""
    import torch
    from safetensors.torch import load_file, save_file

    def write(tmp: Path) -> None:
        config = dict(GELU_BERT, vocab_size=vocab("bpe"), max_position_embeddings=514, pad_token_id=1,
                      bos_token_id=0, eos_token_id=2, rope_parameters={"rope_type": "default", "rope_theta": 20000.0})
        model = random_model("JinaEmbeddingsV3Config", "JinaEmbeddingsV3Model", seed, config)
        model.save_pretrained(tmp)
        weights = {f"roberta.{k}": v for k, v in load_file(str(tmp / "model.safetensors")).items()
                   if not k.startswith("pooler.")}
        torch.manual_seed(seed + 1)
        weights["linear.weight"] = torch.randn(dim, 128) / 128 ** 0.5
        save_file(weights, str(tmp / "model.safetensors"))
        # XLMRobertaFlashConfig's LoRA defaults (jina-colbert-v2 has no adapters; vLLM's loader reads them)
        _edit_config(tmp, architectures=["ColBERTJinaRobertaModel"], position_embedding_type="rotary",
                     rotary_emb_base=20000.0, dim=dim, lora_adaptations=None, lora_rank=4, lora_alpha=1)
        _local_config_class(tmp, "XLMRobertaFlashConfig", "jina_embeddings_v3", "JinaEmbeddingsV3Config",
                            "xlm-roberta", "jinaai/xlm-roberta-flash-implementation's config class name.")

    return build_checkpoint(dest, write, "bpe")


def spm_tokenizer(dest: Path, vocab_size: int = 1000) -> Path:
    """A SigLIP tokenizer (``SiglipTokenizer``: SentencePiece unigram,
    ``</s>`` appended, pad ``</s>``) trained with ``sentencepiece`` on the
    STS-B test sentences; reused when present."""
    dest = Path(dest)
    if (dest / "spiece.model").exists():
        return dest
    import sentencepiece as spm

    with atomic_dir(dest) as tmp:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(sts_test().sentences),
                                       model_prefix=str(tmp / "spiece"), vocab_size=vocab_size, pad_id=0,
                                       eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    return dest


def make_siglip(dest: Path, image_size: int = 32, patch_size: int = 8, seed: int = 0) -> Path:
    """A random-weight ``SiglipModel`` (both towers: 2 layers, hidden 128,
    heads of 64; 32x32 images in 8x8 patches; 64 text positions), saved with a
    ``SiglipProcessor`` (``SiglipImageProcessor`` for that size, the local
    SentencePiece ``SiglipTokenizer``)."""
    dest = Path(dest)
    if (dest / "config.json").exists():
        return dest
    import torch
    import transformers

    spm_dir = spm_tokenizer(dest.parent / "_spm-tokenizer")
    tok = transformers.SiglipTokenizer(vocab_file=str(spm_dir / "spiece.model"), model_max_length=64)
    processor = transformers.SiglipProcessor(
        image_processor=transformers.SiglipImageProcessor(size={"height": image_size, "width": image_size}),
        tokenizer=tok)
    config = transformers.SiglipConfig(
        text_config=dict(TINY, vocab_size=len(tok), max_position_embeddings=64, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, projection_size=128),
        vision_config=dict(TINY, image_size=image_size, patch_size=patch_size))
    torch.manual_seed(seed)
    model = transformers.SiglipModel(config).to(torch.float32).eval()
    return save_model_and_processor(dest, model, processor)


# vLLM's JinaForRankingPool: the document and query embedding tokens, by id (Qwen's)
JINA_RANKING_TOKENS = {"<|embed_token|>": 151670, "<|rerank_token|>": 151671}


def jina_ranking_tokenizer(tmp: Path) -> int:
    """Write into ``tmp`` MiniLM's tokenizer (WordPiece, [CLS] ... [SEP])
    with its vocabulary padded by ``[unused-N]`` tokens up to 151,670 and
    ``JINA_RANKING_TOKENS`` added as special tokens at their ids; return the
    vocabulary size (151,672)."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    minilm = AutoTokenizer.from_pretrained(str(minilm_path()))
    spec = json.loads(minilm.backend_tokenizer.to_str())
    words = spec["model"]["vocab"]
    first = min(JINA_RANKING_TOKENS.values())
    words.update({f"[unused-{i}]": i for i in range(len(words), first)})
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), unk_token="[UNK]",
                                  sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
                                  model_max_length=512)
    tok.add_special_tokens({"additional_special_tokens": list(JINA_RANKING_TOKENS)})
    for token, token_id in JINA_RANKING_TOKENS.items():
        if tok.convert_tokens_to_ids(token) != token_id:
            raise RuntimeError(f"{token} got id {tok.convert_tokens_to_ids(token)}, not {token_id}")
    tok.save_pretrained(tmp)
    return len(tok)


def make_jina_reranker(dest: Path, seed: int = 0) -> Path:
    """jina-reranker-v3's layout (``JinaForRanking``): transformers'
    ``Qwen3Model`` (2 layers, hidden 64, 2 heads of 64, one KV head: a small
    hidden size, as the embedding table has 151,672 rows) under ``model.``,
    the projector ``projector.0`` (64 -> 32) and ``projector.2`` (32 -> 512,
    vLLM's JinaForRankingConfig sets embedding_size 512), random, with
    ``jina_ranking_tokenizer``'s tokenizer; reused when present."""
    dest = Path(dest)
    if (dest / "config.json").exists():
        return dest
    import torch
    from safetensors.torch import save_file

    with atomic_dir(dest) as tmp:
        vocab_size = jina_ranking_tokenizer(tmp)
        config = dict(TINY, hidden_size=64, intermediate_size=128, num_key_value_heads=1, head_dim=64,
                      max_position_embeddings=512, vocab_size=vocab_size, tie_word_embeddings=False)
        model = random_model("Qwen3Config", "Qwen3Model", seed, config)
        generator = torch.Generator().manual_seed(seed + 1)
        weights = {f"model.{k}": v.contiguous() for k, v in model.state_dict().items()}
        weights["projector.0.weight"] = torch.randn(32, 64, generator=generator) / 8.0
        weights["projector.2.weight"] = torch.randn(512, 32, generator=generator) / 32**0.5
        model.config.architectures = ["JinaForRanking"]
        model.config.save_pretrained(tmp)
        save_file(weights, str(tmp / "model.safetensors"))
    return dest
