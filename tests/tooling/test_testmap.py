"""scripts/series/testmap.py: what a mapped test reaches, read statically, and
the names of it the unpatched base does not define (what lint refuses)."""

from __future__ import annotations

from pathlib import Path

from scripts.series.testmap import BaseSources, reached_names, unknown_names

BASE = {
    "vllm/__init__.py": "def __getattr__(name):\n    return MODULE_ATTRS[name]\nMODULE_ATTRS = {'LLM': 'x'}\n",
    "vllm/config/__init__.py": "from vllm.config.vllm import *\n",
    "vllm/config/vllm.py": "HAS_TRITON = False\nclass VllmConfig:\n    pass\n",
    "vllm/platforms/__init__.py": "",
    "vllm/platforms/cpu.py": "import logging\nlogger = logging.getLogger(__name__)\n",
}
HELPERS = {
    "tests/__init__.py": "",
    "tests/unit/__init__.py": "",
    "tests/unit/conftest.py": (
        "import pytest\n\n\n@pytest.fixture\ndef config():\n"
        "    from vllm.config.vllm import only_in_the_series_fixture\n    return 1\n"),
    "tests/unit/helpers.py": (
        "def used():\n    from vllm.config import VllmConfig\n    return VllmConfig\n\n\n"
        "def unused():\n    from vllm.config.vllm import only_in_the_series_unused\n"),
}


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_what_a_test_reaches_and_what_the_base_lacks(tmp_path):
    sources = BaseSources(write(tmp_path / "base", BASE))
    repo = write(tmp_path / "repo", {**HELPERS, "tests/unit/test_x.py": (
        "import vllm.config.vllm as cfg\n"
        "from vllm import LLM\n"
        "from tests.unit.helpers import used, unused\n\n\n"
        "def test_public():\n    assert used() and LLM and cfg.HAS_TRITON is False\n\n\n"
        "def test_series_attribute():\n    assert cfg.ONLY_IN_THE_SERIES\n\n\n"
        "def test_fixture(config):\n    pass\n\n\n"
        "def test_patch_target(monkeypatch):\n"
        "    monkeypatch.setattr('vllm.platforms.cpu.preload_error', None)\n\n\n"
        "def test_child_code():\n    code = 'from vllm.platforms.cpu import logger, preload_error'\n\n\n"
        "def test_fallback_for_later_releases():\n"
        "    try:\n        from vllm.config.vllm import VllmConfig\n"
        "    except ImportError:\n        from vllm.renderers.moved import VllmConfig\n"
        "    assert VllmConfig\n\n\n"
        "def test_base_keeps_the_later_home():\n"
        "    try:\n        from vllm.renderers.moved import VllmConfig\n"
        "    except ImportError:\n        from vllm.config.vllm import VllmConfig\n"
        "    assert VllmConfig\n\n\n"
        "def test_no_home_in_the_base():\n"
        "    try:\n        from vllm.renderers.moved import VllmConfig\n"
        "    except ImportError:\n        from vllm.config.vllm import only_in_the_series\n"
        "    assert VllmConfig\n\n\n"
        "def test_base_keeps_the_third_home():\n"
        "    try:\n        from vllm.renderers.moved import VllmConfig\n"
        "    except ImportError:\n"
        "        try:\n            from vllm.entrypoints.moved import VllmConfig\n"
        "        except ImportError:\n            from vllm.config.vllm import VllmConfig\n"
        "    assert VllmConfig\n\n\n"
        "def test_none_of_three_homes_in_the_base():\n"
        "    try:\n        from vllm.renderers.moved import VllmConfig\n"
        "    except ImportError:\n"
        "        try:\n            from vllm.entrypoints.moved import VllmConfig\n"
        "        except ImportError:\n            from vllm.config.vllm import only_in_the_series\n"
        "    assert VllmConfig\n\n\n"
        "def test_probe_of_a_module_the_base_lacks():\n"
        "    import importlib.util\n"
        "    assert importlib.util.find_spec('vllm.v1.worker.removed_runner') is None\n")})
    node = "tests/unit/test_x.py::{}".format
    assert unknown_names(node("test_public"), sources, repo) == []
    assert ("vllm.config", "VllmConfig") in reached_names(node("test_public"), repo)  # through the helper it calls
    assert unknown_names(node("test_series_attribute"), sources, repo) == ["vllm.config.vllm.ONLY_IN_THE_SERIES"]
    assert unknown_names(node("test_fixture"), sources, repo) == ["vllm.config.vllm.only_in_the_series_fixture"]
    assert unknown_names(node("test_patch_target"), sources, repo) == ["vllm.platforms.cpu.preload_error"]
    assert unknown_names(node("test_child_code"), sources, repo) == ["vllm.platforms.cpu.preload_error"]
    assert unknown_names(node("test_fallback_for_later_releases"), sources, repo) == []
    # a line whose base keeps the name where the handler looks (a line on a later release)
    assert unknown_names(node("test_base_keeps_the_later_home"), sources, repo) == []
    assert unknown_names(node("test_no_home_in_the_base"), sources, repo) == ["vllm.renderers.moved"]
    assert ("vllm.renderers.moved", "VllmConfig") in reached_names(node("test_no_home_in_the_base"), repo)
    # three homes: a try nested alone in the handler is one more alternative of the outer one
    assert unknown_names(node("test_base_keeps_the_third_home"), sources, repo) == []
    assert unknown_names(node("test_none_of_three_homes_in_the_base"), sources, repo) == ["vllm.renderers.moved"]
    # a module name given to find_spec is asked about: the test handles its absence
    assert unknown_names(node("test_probe_of_a_module_the_base_lacks"), sources, repo) == []
