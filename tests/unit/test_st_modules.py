"""Issue 38 item 1 (patches 0059, 0060): every module class and setting
sentence-transformers writes into a saved model is served as
sentence-transformers computes it or refused at start-up, naming the module,
its folder and the setting.

The classes come from the installed sentence-transformers itself (6.2: every
``torch.nn.Module`` its ``*.modules`` packages define), so a release that adds
a module fails here until ``ST_MODULES`` says what vLLM does with it. The
checkpoints are saved by sentence-transformers (``scripts.validation.checkpoints.st_saved``)
and read through the engine's own config (``EngineArgs.create_engine_config``).
The values the engine computes (SPLADE sum against ``SparseEncoder.encode``, a
cross-encoder's default prompt against ``CrossEncoder.predict``) are compared in
``tests/e2e/test_fault_st_modules.py``; ``docs/sentence-transformers.md`` lists
every module and setting as this module's tables do."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import shutil
from pathlib import Path

import pytest

from scripts.validation.checkpoints import st_saved

pytestmark = pytest.mark.line("0.32.0", "0.34.0")

ROOT = Path(__file__).resolve().parents[2]
SPLADE = {"hf_overrides": {"architectures": ["BertSpladeSparseEmbeddingModel"]}}
MODULE_PACKAGES = ("base", "sentence_transformer", "sparse_encoder", "cross_encoder", "multi_vector_encoder")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("st-modules")
    makers = {
        "router": lambda p: st_saved.save_router(p),
        "splade_sum": lambda p: st_saved.save_sparse(p, "sum"),
        "splade_fill_mask_log1p": lambda p: st_saved.save_sparse(p, "max", "log1p_relu", mlm_transformer=False),
        "mean": lambda p: st_saved.save_st(p, "mean"),
    }
    made = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = makers[name](root / name)
        return made[name]

    return get


def st_module_classes() -> set[str]:
    """The class name of every module the installed sentence-transformers
    defines in its ``<package>.modules`` packages (the abstract bases aside)."""
    import torch

    names = set()
    for package in MODULE_PACKAGES:
        module = importlib.import_module(f"sentence_transformers.{package}.modules")
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, torch.nn.Module)
                    and obj.__module__.startswith("sentence_transformers.") and not inspect.isabstract(obj)
                    and name not in ("Module", "InputModule")):
                names.add(name)
    return names


def test_every_module_class_of_sentence_transformers_is_served_or_refused():
    from vllm.transformers_utils.sentence_transformers import ST_MODULES

    classes = st_module_classes()
    assert len(classes) >= 20
    assert sorted(classes - set(ST_MODULES)) == []


def test_the_docs_table_lists_each_module_and_setting_as_served_or_refused():
    from vllm.transformers_utils.sentence_transformers import ST_MODEL_SETTINGS, ST_MODULES

    rows = {}
    for line in (ROOT / "docs" / "sentence-transformers.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and (m := re.fullmatch(r"`(\w+)`", cells[0])):
            rows[m.group(1)] = cells[1]
    expected = {name: "served" if entry.served else "refused"
                for name, entry in {**ST_MODULES, **ST_MODEL_SETTINGS}.items()}
    assert rows == expected


def test_a_router_is_refused_naming_it_its_routes_and_the_fix(real_config, saved):
    with pytest.raises(ValueError) as e:
        real_config(str(saved("router")), "pooling")
    message = str(e.value)
    assert "module Router (2_Router of" in message
    assert "default route 'document'" in message and "query: " in message and "document: " in message
    assert "serve each route as its own model" in message


def test_nested_modules_of_a_router_are_read(saved):
    from vllm.transformers_utils.sentence_transformers import get_st_modules, st_class_name

    modules = [(folder, st_class_name(t)) for folder, t in get_st_modules(str(saved("router")))]
    assert modules[:3] == [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Router", "Router")]
    nested = sorted(name for folder, name in modules if folder.startswith("2_Router/"))
    assert nested == ["Dense", "Dense"]


@pytest.mark.parametrize(("name", "refused"), [
    ("splade_sum", "module MLMTransformer (. of"),  # the first SPLADE module of modules.json
    ("splade_fill_mask_log1p", "module SpladePooling (1_SpladePooling of"),  # after a plain Transformer
])
def test_a_sparse_encoder_needs_the_splade_architecture(real_config, saved, name, refused):
    with pytest.raises(ValueError) as e:
        real_config(str(saved(name)), "pooling")
    assert refused in str(e.value)
    assert "BertSpladeSparseEmbeddingModel" in str(e.value)
    config = real_config(str(saved(name)), "pooling", **SPLADE)
    assert config.model_config.architecture == "BertSpladeSparseEmbeddingModel"


@pytest.mark.parametrize(("name", "strategy", "activation"), [
    ("splade_sum", "sum", "relu"),
    ("splade_fill_mask_log1p", "max", "log1p_relu"),
])
def test_splade_pooling_is_read_as_saved(saved, name, strategy, activation):
    from vllm.transformers_utils.sentence_transformers import get_st_splade_pooling

    pooling = get_st_splade_pooling(str(saved(name)))
    assert (pooling.pooling_strategy, pooling.activation_function) == (strategy, activation)


def test_a_sparse_encoder_is_scored_by_dot_product(saved):
    from sentence_transformers import SparseEncoder

    from vllm.transformers_utils.config import get_st_similarity_fn_name

    path = str(saved("splade_sum"))
    assert SparseEncoder(path, device="cpu").similarity_fn_name == "dot"
    assert get_st_similarity_fn_name(path) == "dot"


def _copy_with_st_config(src: Path, dest: Path, **settings) -> Path:
    shutil.copytree(src, dest)
    st_config_file = dest / "config_sentence_transformers.json"
    st_config = json.loads(st_config_file.read_text())
    st_config.update(settings)
    st_config_file.write_text(json.dumps(st_config))
    return dest


@pytest.mark.parametrize(("setting", "value"), [("truncate_dim", 32), ("max_active_dims", 64)])
def test_settings_vllm_does_not_serve_are_refused(real_config, saved, tmp_path, setting, value):
    from sentence_transformers import SentenceTransformer

    model = _copy_with_st_config(saved("mean"), tmp_path / "model", **{setting: value})
    if setting == "truncate_dim":  # sentence-transformers reads it: 32-d embeddings
        assert SentenceTransformer(str(model), device="cpu").encode(["a"]).shape == (1, 32)
    with pytest.raises(ValueError) as e:
        real_config(str(model), "pooling")
    assert f"setting {setting}={value}" in str(e.value) and "set it to null" in str(e.value)


def test_a_module_vllm_has_no_layer_for_is_refused(real_config, tmp_path):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import LayerNorm, Pooling

    from scripts.validation.checkpoints.zoo import make_tiny_bert

    backbone = make_tiny_bert(st_saved.BACKBONE, "base")
    torch.manual_seed(3)
    transformer = Transformer(str(backbone))
    SentenceTransformer(modules=[transformer, Pooling(128, "mean"), LayerNorm(128)], device="cpu").save(
        str(tmp_path / "ln"))
    with pytest.raises(ValueError) as e:
        real_config(str(tmp_path / "ln"), "pooling")
    assert "module LayerNorm (2_LayerNorm of" in str(e.value)
    assert "remove it from modules.json" in str(e.value)


def test_a_module_sentence_transformers_does_not_define_is_refused(real_config, saved, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(saved("mean"), model)
    modules = json.loads((model / "modules.json").read_text())
    modules.append({"idx": len(modules), "name": "9", "path": "9_Whitening",
                    "type": "sentence_transformers.models.Whitening"})
    (model / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError) as e:
        real_config(str(model), "pooling")
    assert "sentence_transformers.models.Whitening (9_Whitening of" in str(e.value)
    assert "none vLLM knows" in str(e.value)
