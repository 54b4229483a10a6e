"""The validation matrix's inventory (scripts/validation/matrix/inventory.py) against the
base's model registry, without an engine: every pooling architecture of the
registry has an entry with a status, and the inventory lists nothing the
registry does not have. Also the row definitions' shape: unique ids, one
``make test`` case per family, every case's architecture resolvable."""

from __future__ import annotations

import pytest

from scripts.validation.matrix.inventory import implementing_class, inventory, not_instantiable, registry_pooling
from scripts.validation.matrix.rows import CASES, FAMILIES
from scripts.validation.matrix.selector_cases import SELECTOR_CASES


def test_every_registry_pooling_architecture_has_an_entry_with_a_status():
    entries = inventory()
    assert set(registry_pooling()) <= {e.impl for e in entries}
    assert [e.impl for e in entries if e.status == "MISSING"] == []
    names = {n for d in registry_pooling().values() for ns in d.values() for n in ns}
    assert names <= {n for e in entries for n in e.names}


def test_inventory_lists_nothing_the_registry_does_not_have():
    registry = registry_pooling()
    for e in inventory():
        for name in e.names:
            assert implementing_class(name)[0] == e.impl, name
        assert e.impl in registry or e.sources == ("adapter",), e.impl
    assert set(not_instantiable()) <= set(registry)
    assert {s.impl for s in SELECTOR_CASES} <= set(registry)


def test_a_new_registry_architecture_without_an_entry_is_reported(monkeypatch):
    from vllm.model_executor.models import registry

    monkeypatch.setitem(registry._EMBEDDING_MODELS, "BrandNewModel", ("brand_new", "BrandNewModel"))
    missing = [e for e in inventory() if e.status == "MISSING"]
    assert [(e.impl, e.names) for e in missing] == [("brand_new:BrandNewModel", ("BrandNewModel",))]


def test_an_inventory_name_the_registry_lacks_is_refused():
    with pytest.raises(KeyError, match="NoSuchArchitecture"):
        implementing_class("NoSuchArchitecture")


def test_adapters_resolve_through_the_registrys_suffix_rules():
    assert implementing_class("Qwen3ForSequenceClassification") == ("qwen3:Qwen3ForCausalLM", "adapter")
    assert implementing_class("MistralModel") == ("llama:LlamaForCausalLM", "_EMBEDDING_MODELS")


def test_cases_have_unique_ids_tasks_and_one_make_test_case_per_family():
    assert len({c.id for c in CASES}) == len(CASES)
    assert all(c.tasks and c.family in FAMILIES for c in CASES)
    smoke = [c.family for c in CASES if c.smoke]
    assert len(smoke) == len(set(smoke))
    assert set(smoke) == {c.family for c in CASES}
    assert len({s.id for s in SELECTOR_CASES}) == len(SELECTOR_CASES)
