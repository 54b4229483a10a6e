"""The checkpoint factory: the small random-weight checkpoints of every
pooling architecture the validation matrix runs (``scripts/validation/matrix/rows.py``)
and of those the jobs and the tests use, made at run time with transformers,
all local.

Every checkpoint has 2 layers, hidden size 128 and attention heads of 64
(the CPU attention backend needs head_dim >= 64), fp32, and is saved with
``save_pretrained`` (or, for layouts transformers has no class for, as the
published checkpoints lay them out: safetensors plus ``config.json``). The
tokenizer is MiniLM's (BERT WordPiece, ``scripts.validation.checkpoints.models.copy_tokenizer``)
unless the architecture's embeddings need their own: RoBERTa / XLM-R
position ids start after ``padding_idx`` and their pair encoding has no
token type ids, so those checkpoints get a RoBERTa-style byte-level BPE
tokenizer trained here on the STS-B sentences (``bpe_tokenizer``).

Each ``make_*`` takes the destination directory first, reuses it when it
holds a ``config.json`` and returns it; it is deterministic (seeded).
``make_hf`` (a transformers class) and ``make_custom`` (a layout transformers
has no class for) are the factory; ``make_tiny_bert``, ``make_tiny_qwen3``,
``make_tiny_modernbert`` and ``make_tiny_colbert`` are the checkpoints the
smoke jobs, the benchmarks and the tests share, each one call of the factory.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from scripts.validation.checkpoints.models import (MINILM_VOCAB, MODELS, TINY, TINY_BERT, TINY_DECODER, atomic_dir,
                                                   copy_tokenizer, sts_test)

BPE_DIR = MODELS / "_bpe-tokenizer"
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # RoBERTa's ids 0..4


def bpe_tokenizer(dest: Path, vocab_size: int = 2000) -> Path:
    """A RoBERTa-style byte-level BPE tokenizer (``<s>``=0, ``<pad>``=1,
    ``</s>``=2; ``<s> A </s></s> B </s>`` pairs, no token type ids) trained
    with the ``tokenizers`` library on the STS-B test sentences, saved as a
    ``RobertaTokenizerFast`` in ``dest``; reused when present."""
    dest = Path(dest)
    if (dest / "tokenizer.json").exists():
        return dest
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import RobertaProcessing
    from transformers import RobertaTokenizerFast

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(sts_test().sentences, vocab_size=vocab_size, special_tokens=BPE_SPECIALS,
                            show_progress=False)
    tok.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0))
    fast = RobertaTokenizerFast(tokenizer_object=tok._tokenizer, bos_token="<s>", eos_token="</s>",
                                sep_token="</s>", cls_token="<s>", unk_token="<unk>", pad_token="<pad>",
                                mask_token="<mask>", model_max_length=512)
    with atomic_dir(dest) as tmp:
        fast.save_pretrained(tmp)
    return dest


def _tokenizer_into(tmp: Path, tokenizer: str) -> None:
    if tokenizer == "minilm":
        copy_tokenizer(tmp)
    elif tokenizer == "bpe":
        src = bpe_tokenizer(BPE_DIR)
        for f in src.iterdir():
            shutil.copyfile(f, tmp / f.name)
    else:
        raise ValueError(f"unknown tokenizer {tokenizer!r}: 'minilm' or 'bpe'")


def build_checkpoint(dest: Path, write: Callable[[Path], None], tokenizer: str) -> Path:
    """``dest`` made by ``write(tmp)`` (the weights and the config) plus the
    ``tokenizer`` (``minilm`` or ``bpe``) in an ``atomic_dir``; reused, as it
    is, when it holds a ``config.json``."""
    dest = Path(dest)
    if (dest / "config.json").exists():
        return dest
    with atomic_dir(dest) as tmp:
        write(tmp)
        _tokenizer_into(tmp, tokenizer)
    return dest


def random_model(config_cls: str, model_cls: str, seed: int, config: dict):
    """``transformers.<model_cls>(<config_cls>(**config))`` initialised after
    ``torch.manual_seed(seed)``, fp32, in eval mode."""
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = getattr(transformers, config_cls)(**config)
    return getattr(transformers, model_cls)(cfg).to(torch.float32).eval()


def vocab(tokenizer: str) -> int:
    """Vocabulary size of a tokenizer kind (``minilm``: 30,522; ``bpe``: as trained)."""
    if tokenizer == "minilm":
        return MINILM_VOCAB
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(str(bpe_tokenizer(BPE_DIR))))


def make_hf(dest: Path, config_cls: str, model_cls: str, *, tokenizer: str = "minilm",
            architectures: list[str] | None = None, decoder: bool = False, seed: int = 0,
            scale: dict[str, float] | None = None, **config) -> Path:
    """Save ``transformers.<model_cls>(<config_cls>(small sizes | config))`` to
    ``dest``; ``architectures`` overrides the class name written to
    ``config.json`` (a registry name such as ``MistralModel``); ``decoder``
    adds the decoder sizes (1 KV head, head_dim 64, untied embeddings);
    ``scale`` multiplies parameters, by name, after the random initialisation
    (``{"classifier.weight": 50.0}``)."""
    base = TINY_DECODER if decoder else TINY
    config = {**base, "vocab_size": vocab(tokenizer), **config}

    def write(tmp: Path) -> None:
        import json

        model = random_model(config_cls, model_cls, seed, config)
        if scale:
            import torch

            with torch.no_grad():
                for name, factor in scale.items():
                    model.get_parameter(name).mul_(factor)
        model.save_pretrained(tmp)
        if architectures:  # save_pretrained writes the class name: set the registry name after it
            cfg = json.loads((tmp / "config.json").read_text())
            cfg["architectures"] = architectures
            (tmp / "config.json").write_text(json.dumps(cfg, indent=2))

    return build_checkpoint(dest, write, tokenizer)


def make_custom(dest: Path, config_cls: str, backbone_cls: str, *, architectures: list[str],
                prefix: str = "", heads: dict | None = None, tokenizer: str = "minilm",
                config_attrs: dict | None = None, extra_files: dict | None = None,
                decoder: bool = False, seed: int = 0, **config) -> Path:
    """A checkpoint in a layout transformers has no class for: the backbone
    ``transformers.<backbone_cls>``'s weights under ``prefix``, plus ``heads``
    (name -> shape; random, scaled by 1/sqrt(fan-in)), ``config_attrs`` added
    to ``config.json``, and ``extra_files`` (file name -> {name: shape}) saved
    with ``torch.save`` beside it (BGE-M3's ``sparse_linear.pt``)."""
    import torch
    from safetensors.torch import save_file

    base = TINY_DECODER if decoder else TINY
    config = {**base, "vocab_size": vocab(tokenizer), **config}

    def rand(shape):
        return torch.randn(*shape) / (shape[-1] ** 0.5 if len(shape) > 1 else 10.0)

    def write(tmp: Path) -> None:
        model = random_model(config_cls, backbone_cls, seed, config)
        weights = {f"{prefix}{k}": v.contiguous() for k, v in model.state_dict().items()
                   if not k.startswith("pooler.")}
        weights.update({k: rand(s) for k, s in (heads or {}).items()})
        model.config.architectures = architectures
        for k, v in (config_attrs or {}).items():
            setattr(model.config, k, v)
        model.config.save_pretrained(tmp)
        save_file(weights, str(tmp / "model.safetensors"))
        for name, tensors in (extra_files or {}).items():
            torch.save({k: rand(s) for k, s in tensors.items()}, tmp / name)

    return build_checkpoint(dest, write, tokenizer)



# The smoke jobs', the benchmarks' and the tests' shared checkpoints (MiniLM's tokenizer, fp32).
TINY_BERT_HEADS = {
    "base": "BertModel",
    "seq_cls": "BertForSequenceClassification",
    "token_cls": "BertForTokenClassification",
    "mlm": "BertForMaskedLM",
}


def make_tiny_bert(dest: Path, head: str = "base", num_labels: int = 3, seed: int = 0,
                   classifier_scale: float = 1.0) -> Path:
    """A random-weight BERT with ``head`` (a ``TINY_BERT_HEADS`` key), made by
    ``make_hf``: 2 layers, hidden 128, 2 heads of 64, 512 positions,
    ``num_labels`` labels. ``classifier_scale`` multiplies the classifier's
    weights (a cross-encoder with ``num_labels=1`` and a scale of 50 scores
    pairs across (0, 1) instead of near 0.5). ``KeyError`` for an unknown head."""
    scale = {"classifier.weight": classifier_scale} if classifier_scale != 1.0 else None
    return make_hf(dest, "BertConfig", TINY_BERT_HEADS[head], seed=seed, scale=scale,
                   max_position_embeddings=TINY_BERT["max_position_embeddings"], num_labels=num_labels)


def make_tiny_qwen3(dest: Path, seed: int = 0) -> Path:
    """A random-weight ``Qwen3ForCausalLM`` made by ``make_hf`` (``TINY_DECODER``
    sizes: 2 layers, hidden 128, 2 heads of 64, one KV head; tied embeddings)."""
    return make_hf(dest, "Qwen3Config", "Qwen3ForCausalLM", decoder=True, seed=seed, tie_word_embeddings=True)


# ColBERT backbones buildable small: transformers config and model classes,
# the checkpoint's prefix for the backbone, the vLLM architecture, config fields.
COLBERT_BACKBONES = {
    "bert": ("BertConfig", "BertModel", "bert.", "HF_ColBERT", {}),
    "modernbert": ("ModernBertConfig", "ModernBertModel", "model.", "ColBERTModernBertModel",
                   {"pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102, "cls_token_id": 101,
                    "sep_token_id": 102, "global_attn_every_n_layers": 1, "local_attention": 128}),
}


def make_tiny_modernbert(dest: Path, num_labels: int = 3, seed: int = 0) -> Path:
    """A random-weight ``ModernBertForSequenceClassification`` made by
    ``make_hf`` (CLS pooling, ``TINY_BERT`` sizes: 2 layers, hidden 128, 2
    heads of 64; ``num_labels`` labels)."""
    return make_hf(dest, "ModernBertConfig", "ModernBertForSequenceClassification", seed=seed,
                   max_position_embeddings=TINY_BERT["max_position_embeddings"], num_labels=num_labels,
                   classifier_pooling="cls", **COLBERT_BACKBONES["modernbert"][4])


def make_tiny_colbert(dest: Path, backbone: str = "bert", dim: int = 32, seed: int = 0) -> Path:
    """A random-weight ColBERT checkpoint on ``backbone`` (a ``COLBERT_BACKBONES``
    key) made by ``make_custom``: the backbone under its prefix plus a
    bias-free ``linear`` projection to ``dim`` (colbert-ai's ``HF_ColBERT``
    layout), ``dim`` declared in ``config.json``; ``TINY_BERT`` sizes. Its
    reference is ``scripts.validation.references.colbert_tokens``."""
    config_cls, model_cls, prefix, arch, extra = COLBERT_BACKBONES[backbone]
    return make_custom(dest, config_cls, model_cls, architectures=[arch], prefix=prefix,
                       heads={"linear.weight": (dim, TINY["hidden_size"])}, config_attrs={"dim": dim}, seed=seed,
                       max_position_embeddings=TINY_BERT["max_position_embeddings"], **extra)

def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's byte-to-printable-character table (the BPE alphabet)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + len([x for x in cs if x >= 256]))
    return dict(zip(bs, map(chr, cs)))


def make_clip(dest: Path, image_size: int = 32, patch_size: int = 8, seed: int = 0) -> Path:
    """A random-weight ``CLIPModel`` (text and vision towers: 2 layers, hidden
    128, heads of 64, projection 128 (vLLM's CLIP needs projection_dim >= the
    text hidden size, as every published CLIP has); 32x32 images in 8x8 patches) with a
    character-level CLIP tokenizer (the byte alphabet, each character also
    with CLIP's ``</w>`` word end, no merges; ``<|startoftext|>`` and
    ``<|endoftext|>`` last) and a ``CLIPImageProcessor`` for that size, saved
    as a ``CLIPProcessor``. All built locally."""
    dest = Path(dest)
    if (dest / "config.json").exists():
        return dest
    import torch
    import transformers

    chars = list(_bytes_to_unicode().values())
    vocab = {t: i for i, t in enumerate(chars + [c + "</w>" for c in chars])}
    vocab.update({"<|startoftext|>": len(vocab), "<|endoftext|>": len(vocab) + 1})
    tok = transformers.CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77)
    size = {"height": image_size, "width": image_size}
    processor = transformers.CLIPProcessor(
        image_processor=transformers.CLIPImageProcessor(size={"shortest_edge": image_size}, crop_size=size),
        tokenizer=tok)
    tower = dict(TINY)
    config = transformers.CLIPConfig(
        text_config=dict(tower, vocab_size=len(vocab), max_position_embeddings=77, bos_token_id=len(vocab) - 2,
                         eos_token_id=len(vocab) - 1, pad_token_id=len(vocab) - 1, projection_dim=128),
        vision_config=dict(tower, image_size=image_size, patch_size=patch_size, projection_dim=128),
        projection_dim=128)
    torch.manual_seed(seed)
    model = transformers.CLIPModel(config).to(torch.float32).eval()
    return save_model_and_processor(dest, model, processor)


def save_model_and_processor(dest: Path, model, processor) -> Path:
    """``model`` and its ``processor`` saved into ``dest`` (``atomic_dir``)."""
    with atomic_dir(dest) as tmp:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
    return dest
