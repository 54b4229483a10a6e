"""Checkpoints saved by sentence-transformers itself (the installed release,
6.2 here), for the tests of how vLLM reads their settings (issue 28 item 2).

Each ``save_*`` builds a ``SentenceTransformer`` / ``CrossEncoder`` from a
tiny random BERT (``scripts.validation.checkpoints.zoo.make_tiny_bert``: 2 layers,
hidden 128, MiniLM's tokenizer) and saves it with ``.save``, so the files are
exactly what that release writes: ``modules.json`` with its module type
names, ``1_Pooling/config.json`` with ``"pooling_mode"``, ``2_Dense``,
``*_Normalize``, ``config_sentence_transformers.json`` (prompts, similarity
function, a cross-encoder's activation) and the maximum length in the
tokenizer's ``model_max_length``. ``save_legacy`` writes the spelling of
sentence-transformers < 5.4 by hand (``sentence_transformers.models.*``
types, ``pooling_mode_*_tokens`` flags, ``max_seq_length`` in
``sentence_bert_config.json``), as published models such as
all-MiniLM-L6-v2 carry it.

All return the directory; an existing one (with ``modules.json``) is reused.
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts.validation.checkpoints.models import MODELS, atomic_dir, copy_tokenizer
from scripts.validation.checkpoints.zoo import make_tiny_bert

BACKBONE = MODELS / "tiny-bert-base"
CE_BACKBONE = MODELS / "tiny-bert-cross-encoder-st"


def _done(dest: Path) -> bool:
    return (Path(dest) / "modules.json").exists()


def save_st(dest: Path, pooling_mode="mean", *, dense: tuple[int, str] | None = None, normalize: bool = True,
            max_seq_length: int | None = None, prompts: dict[str, str] | None = None,
            default_prompt_name: str | None = None, similarity_fn_name: str | None = None,
            include_prompt: bool = True) -> Path:
    """A ``SentenceTransformer`` of Transformer(tiny BERT) + Pooling(``pooling_mode``,
    a mode name or a tuple of them) [+ Dense(128 -> ``dense[0]``, activation
    ``dense[1]``, a ``torch.nn`` class name)] [+ Normalize], saved to ``dest``."""
    dest = Path(dest)
    if _done(dest):
        return dest
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    backbone = make_tiny_bert(BACKBONE, "base")
    torch.manual_seed(1)
    transformer = Transformer(str(backbone), max_seq_length=max_seq_length)
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode,
                                    include_prompt=include_prompt)]
    if dense is not None:
        in_features = modules[-1].get_embedding_dimension()
        modules.append(Dense(in_features, dense[0], activation_function=getattr(torch.nn, dense[1])()))
    if normalize:
        modules.append(Normalize())
    model = SentenceTransformer(modules=modules, device="cpu", prompts=prompts,
                                default_prompt_name=default_prompt_name, similarity_fn_name=similarity_fn_name)
    with atomic_dir(dest) as tmp:
        model.save(str(tmp))
    return dest


def save_cross_encoder(dest: Path, activation: str | None = "Identity", num_labels: int = 1,
                       max_length: int | None = None, prompts: dict[str, str] | None = None,
                       default_prompt_name: str | None = None) -> Path:
    """A ``CrossEncoder`` on a tiny ``BertForSequenceClassification`` with
    ``activation_fn=torch.nn.<activation>()`` (None: sentence-transformers'
    default), ``prompts`` and ``default_prompt_name`` (``predict`` puts the
    default prompt before each pair's first text), saved to ``dest``."""
    dest = Path(dest)
    if _done(dest):
        return dest
    import torch
    from sentence_transformers import CrossEncoder

    backbone = make_tiny_bert(CE_BACKBONE.with_name(f"{CE_BACKBONE.name}-{num_labels}"), "seq_cls",
                              num_labels=num_labels, classifier_scale=20.0)
    activation_fn = getattr(torch.nn, activation)() if activation else None
    model = CrossEncoder(str(backbone), device="cpu", activation_fn=activation_fn, max_length=max_length,
                         prompts=prompts, default_prompt_name=default_prompt_name)
    with atomic_dir(dest) as tmp:
        model.save(str(tmp))
    return dest


def save_sparse(dest: Path, pooling_strategy: str = "max", activation_function: str = "relu",
                max_seq_length: int | None = None, similarity_fn_name: str | None = None,
                mlm_transformer: bool = True) -> Path:
    """A ``SparseEncoder`` of MLMTransformer(tiny ``BertForMaskedLM``) (or, with
    ``mlm_transformer=False``, the ``Transformer(transformer_task="fill-mask")``
    sentence-transformers 6 prefers) + SpladePooling(``pooling_strategy`` "max"
    or "sum", ``activation_function`` "relu" or "log1p_relu"), saved to ``dest``
    (``1_SpladePooling/config.json``)."""
    dest = Path(dest)
    if _done(dest):
        return dest
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling, Transformer

    backbone = make_tiny_bert(BACKBONE.with_name("tiny-bert-mlm"), "mlm")
    transformer = (MLMTransformer(str(backbone), max_seq_length=max_seq_length) if mlm_transformer else
                   Transformer(str(backbone), max_seq_length=max_seq_length, transformer_task="fill-mask"))
    modules = [transformer,
               SpladePooling(pooling_strategy=pooling_strategy, activation_function=activation_function)]
    model = SparseEncoder(modules=modules, device="cpu", similarity_fn_name=similarity_fn_name)
    with atomic_dir(dest) as tmp:
        model.save(str(tmp))
    return dest


def save_router(dest: Path, out_features: int = 64) -> Path:
    """An asymmetric ``SentenceTransformer``: Transformer(tiny BERT) +
    Pooling(mean) + ``Router.for_query_document`` with a Dense(128 ->
    ``out_features``) per route (default route "document") + Normalize, saved
    to ``dest`` (the routes' modules nested in ``2_Router/``)."""
    dest = Path(dest)
    if _done(dest):
        return dest
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Router, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    backbone = make_tiny_bert(BACKBONE, "base")
    torch.manual_seed(2)
    transformer = Transformer(str(backbone))
    dim = transformer.get_embedding_dimension()
    router = Router.for_query_document([Dense(dim, out_features)], [Dense(dim, out_features)])
    model = SentenceTransformer(modules=[transformer, Pooling(dim, "mean"), router, Normalize()], device="cpu")
    with atomic_dir(dest) as tmp:
        model.save(str(tmp))
    return dest


def save_legacy(dest: Path, pooling: str | tuple[str, ...] = "mean_tokens", *, normalize: bool = True,
                max_seq_length: int = 100, do_lower_case: bool | None = False) -> Path:
    """The tiny BERT in the layout sentence-transformers < 5.4 wrote:
    ``modules.json`` types ``sentence_transformers.models.{Transformer,Pooling,Normalize}``,
    ``1_Pooling/config.json`` with ``pooling_mode_<pooling>: true`` (for each
    flag of a tuple; the other flags false), ``sentence_bert_config.json``
    with ``max_seq_length`` (and ``do_lower_case`` unless None)."""
    dest = Path(dest)
    if _done(dest):
        return dest
    import shutil

    backbone = make_tiny_bert(BACKBONE, "base")
    flags = ["cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"]
    chosen = (pooling,) if isinstance(pooling, str) else pooling
    with atomic_dir(dest) as tmp:
        for f in backbone.iterdir():
            shutil.copyfile(f, tmp / f.name)
        copy_tokenizer(tmp)
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        if normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
        (tmp / "modules.json").write_text(json.dumps(modules, indent=2))
        (tmp / "1_Pooling").mkdir()
        (tmp / "1_Pooling" / "config.json").write_text(json.dumps(
            {"word_embedding_dimension": 128, **{f"pooling_mode_{f}": f in chosen for f in flags}}, indent=2))
        config = {"max_seq_length": max_seq_length}
        if do_lower_case is not None:
            config["do_lower_case"] = do_lower_case
        (tmp / "sentence_bert_config.json").write_text(json.dumps(config, indent=2))
    return dest


def st_encode(model_dir: Path, sentences: list[str], **kwargs):
    """``SentenceTransformer(model_dir).encode(sentences, **kwargs)``, fp32
    numpy (N, d), on the CPU."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu")
    return model.encode(sentences, convert_to_numpy=True, **kwargs).astype(np.float32)


def st_similarity(model_dir: Path, first: list[str], second: list[str]):
    """The model's own similarity (``similarity_fn_name``) of
    ``encode(first[i])`` and ``encode(second[i])``, pairwise, float64 (N,)."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu")
    a = model.encode(first, convert_to_tensor=True)
    b = model.encode(second, convert_to_tensor=True)
    return np.asarray(model.similarity_pairwise(a, b).tolist(), dtype=np.float64)


def ce_predict(model_dir: Path, pairs: list[tuple[str, str]], **kwargs):
    """``CrossEncoder(model_dir).predict(pairs, **kwargs)`` on the CPU, float64
    (N,) for one label."""
    import numpy as np
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(model_dir), device="cpu")
    return np.asarray(model.predict(pairs, convert_to_numpy=True, **kwargs), dtype=np.float64)


def sparse_encode(model_dir: Path, sentences: list[str]):
    """``SparseEncoder(model_dir).encode(sentences)`` on the CPU, dense fp32
    numpy (N, vocabulary size)."""
    import numpy as np
    from sentence_transformers import SparseEncoder

    model = SparseEncoder(str(model_dir), device="cpu")
    out = model.encode(sentences, convert_to_tensor=True, convert_to_sparse_tensor=False)
    return np.asarray(out.to_dense() if out.is_sparse else out, dtype=np.float32)
