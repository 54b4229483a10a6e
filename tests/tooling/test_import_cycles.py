"""No import cycle among the modules under ``scripts/``: each module's
``import`` and ``from ... import`` statements (absolute or relative, at any
depth: inside functions too) are read with ``ast`` and resolved to modules
under ``scripts/``; the graph they make must have no cycle.

An edge goes to the module a statement names: ``import a.b`` and ``from a
import b`` (``b`` a submodule) reach ``a.b``, ``from a import name`` (a name
``a`` defines) reaches ``a``, the package's ``__init__``. The parent
packages Python initialises on the way are not edges: a package's
``__init__`` importing its submodules makes a cycle only with a submodule that
itself imports the package (``from scripts.x import name``)."""

from __future__ import annotations

import ast
from pathlib import Path

from scripts.common.paths import REPO


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` (a directory under ``root``) by dotted name;
    a package's ``__init__.py`` is the package's name."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _known(dotted: str, modules: dict[str, Path]) -> str | None:
    """``dotted`` or its longest prefix that is one of ``modules``."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in modules:
            return name
    return None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules among ``modules`` that module ``name`` (its source at
    ``path``) imports, by the rule of the module docstring."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, one package up per further dot
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
        else:
            continue
        found |= {known for t in targets if (known := _known(t, modules)) is not None}
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Each module of ``package`` with the modules of the package it imports."""
    modules = module_names(root, package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as the modules along it, the first one repeated at
    the end (``[a, b, a]``), or None when there is none (depth-first search)."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path, on_path = [start], {start}
        stack = [iter(sorted(graph[start]))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:  # every import of path[-1] explored: no cycle through it
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if nxt in on_path:
                return path[path.index(nxt):] + [nxt]
            if nxt in done:
                continue
            path.append(nxt)
            on_path.add(nxt)
            stack.append(iter(sorted(graph[nxt])))
    return None


def test_scripts_import_graph_has_no_cycle():
    graph = import_graph(REPO, "scripts")
    # the scan sees the imports (an empty graph has no cycle either)
    assert "scripts.validation.checkpoints.models" in graph["scripts.validation.checkpoints.zoo"]
    assert "scripts.validation.matrix.runner" in graph["scripts.validation.matrix.__main__"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def _package(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_imports_resolve_absolute_relative_and_inside_functions(tmp_path):
    _package(tmp_path, {
        "pkg/__init__.py": "from pkg.a import f\n",
        "pkg/a.py": "import os\nfrom . import b\n\ndef f():\n    from .sub.c import g\n    import pkg.sub\n",
        "pkg/b.py": "from .sub import c, VALUE\nfrom pkg.a import f as _f\n",
        "pkg/sub/__init__.py": "VALUE = 1\n",
        "pkg/sub/c.py": "from .. import b\nfrom ..sub import VALUE\n",
    })
    assert import_graph(tmp_path, "pkg") == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b", "pkg.sub.c", "pkg.sub"},
        "pkg.b": {"pkg.sub.c", "pkg.sub", "pkg.a"},
        "pkg.sub": set(),
        "pkg.sub.c": {"pkg.b", "pkg.sub"},
    }


def test_a_cycle_is_found_and_named(tmp_path):
    # pkg.a -> pkg.b at import time, pkg.b -> pkg.a inside a function: a cycle all the same
    _package(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import g\n",
                        "pkg/b.py": "def g():\n    from .a import x\n"})
    assert find_cycle(import_graph(tmp_path, "pkg")) == ["pkg.a", "pkg.b", "pkg.a"]


def test_a_package_init_importing_its_submodules_is_no_cycle_unless_one_imports_it(tmp_path):
    files = {"pkg/__init__.py": "from pkg.a import f\nfrom pkg import b\nNAME = 1\n",
             "pkg/a.py": "from pkg.b import h\n\ndef f():\n    return h\n", "pkg/b.py": "def h():\n    pass\n"}
    _package(tmp_path, files)
    assert find_cycle(import_graph(tmp_path, "pkg")) is None  # the parents Python initialises are no edges
    _package(tmp_path, {"pkg/b.py": "from pkg import NAME\n"})  # a name of the package: b imports its __init__
    assert find_cycle(import_graph(tmp_path, "pkg")) == ["pkg", "pkg.a", "pkg.b", "pkg"]
