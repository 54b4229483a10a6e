"""The names of vLLM a mapped test reaches, checked against a line's unpatched
base: the drift signal stays true only if every test ``tests.toml`` maps to a
patch reaches the behaviour through names upstream has too (public API, or
upstream's own seams), so that a release carrying the behaviour under its own
implementation passes it. A test that imports a name only the series defines
fails on every release, whatever the release does.

What a test reaches is read statically (``ast``), from the code that runs for
it: its module's top level (import time), its decorators and body, the
fixtures it requests (its module's and ``conftest.py``'s, transitively), and
the module-level functions and classes those call, in the test's module and
in the ``tests``/``scripts`` modules they import from. In that code it takes

- ``import vllm.a.b`` and ``from vllm.a.b import N`` (``N`` a name of
  ``vllm.a.b`` or its submodule);
- ``alias.N`` where ``alias`` is bound to a vLLM module there (an attribute
  the module must define), and ``monkeypatch.setattr(alias, "N", ...)``;
- strings that name a vLLM object (``"vllm.a.b.N"``, a ``mock.patch``
  target) or hold code importing one (``"from vllm.a import N"``, e.g. code
  run in a subprocess).

Attributes of objects (``config._method()``) are not followed: their types
are not known statically. A ``try`` with an ``except ImportError`` handler
that imports a name where other releases keep it (upstream moved it;
``tests/unit/upstream_names.py``) holds alternatives, as each line's base
keeps the name in one of those homes: the test reaches what the ``try``
body reaches when the base defines all of that, else the vLLM imports of a
handler whose imports the base all defines; when neither holds, the body's
missing names are reported. A name is defined by a module of the base when
its top level binds it (``def``, ``class``, assignment, import, also under
``if``/``try``), through a ``from m import *``, as a submodule, or, in a
module with a module ``__getattr__``, when the module names it in a string
(vLLM's lazy attributes).
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from scripts.common.paths import REPO
from scripts.series.base import Base

_CODE_IMPORT = re.compile(r"\bfrom[ \t]+(vllm(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[\w \t,]+)|\bimport[ \t]+(vllm(?:\.\w+)+)")
_DOTTED = re.compile(r"vllm(?:\.\w+)+")


@dataclass
class _Module:
    """A parsed module of this repository (a test, a conftest, a helper)."""

    path: Path
    name: str
    tree: ast.Module
    defs: dict[str, ast.AST] = field(default_factory=dict)
    # local name -> (module of ours it is imported from, its name there)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, root: Path) -> "_Module":
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(root).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        defs = {n.name: n for n in _top_level_defs(tree.body)}
        imported = {a.asname or a.name: (n.module, a.name) for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.module and not n.level
                    and n.module.split(".")[0] in ("tests", "scripts") for a in n.names}
        return cls(path, name, tree, defs, imported)


class _Reach:
    """Walks the code a test runs and collects the vLLM names it reaches."""

    def __init__(self, root: Path):
        self.root = root
        self.modules: dict[Path, _Module] = {}
        self.seen: set[tuple[Path, str]] = set()
        self.found: set[tuple[str, str | None]] = set()  # (module, name or None for the module itself)
        # a try with an except ImportError handler -> what its body reaches, then
        # the vLLM imports of each such handler (alternatives: see the module docstring)
        self.alternatives: dict[tuple[Path, int], list[set[tuple[str, str | None]]]] = {}

    def module(self, path: Path) -> _Module:
        if path not in self.modules:
            self.modules[path] = _Module.load(path, self.root)
            self._top_level(self.modules[path])
        return self.modules[path]

    def _our_module_path(self, dotted: str) -> Path | None:
        if not dotted.split(".")[0] in ("tests", "scripts"):
            return None
        base = self.root.joinpath(*dotted.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def _top_level(self, mod: _Module) -> None:
        """What runs when ``mod`` is imported: its top-level statements other
        than function and class bodies (decorators and class bodies run)."""
        def run(stmts):
            for stmt in stmts:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for node in [*stmt.decorator_list, *stmt.args.defaults]:
                        self.code(mod, node)
                elif isinstance(stmt, ast.ClassDef):  # its body runs, its methods' bodies do not
                    for node in [*stmt.decorator_list, *stmt.bases]:
                        self.code(mod, node)
                    run(stmt.body)
                elif isinstance(stmt, (ast.If, ast.Try)):
                    self.code(mod, stmt.test) if isinstance(stmt, ast.If) else None
                    for block in ("body", "orelse", "finalbody"):
                        run(getattr(stmt, block, []))
                    for handler in getattr(stmt, "handlers", []):
                        run(handler.body)
                else:
                    self.code(mod, stmt)
        run(mod.tree.body)

    def definition(self, mod: _Module, name: str) -> None:
        """Follow a module-level function or class ``name`` of ``mod``."""
        if (mod.path, name) in self.seen or name not in mod.defs:
            return
        self.seen.add((mod.path, name))
        self.code(mod, mod.defs[name])

    def fixture(self, mod: _Module, name: str) -> None:
        """Follow fixture ``name`` as pytest finds it for a test of ``mod``:
        in the module, else in the conftest.py files from its directory up."""
        if name in mod.defs:
            self.definition(mod, name)
            return
        directory = mod.path.parent
        while directory == self.root or self.root in directory.parents:
            conftest = directory / "conftest.py"
            if conftest.is_file() and name in self.module(conftest).defs:
                self.definition(self.module(conftest), name)
                return
            if directory == self.root:
                break
            directory = directory.parent

    def code(self, mod: _Module, node: ast.AST) -> None:
        """Collect what ``node`` (code of ``mod``) reaches."""
        aliases = self._aliases(mod)
        branches = _import_alternatives(mod.tree)
        # a module name given to importlib's find_spec is asked about, not reached: the code
        # handles its absence (scripts.validation.engine.base_runners: V1's runner module)
        probes = {id(a) for c in ast.walk(node) if isinstance(c, ast.Call) and _is_find_spec(c) for a in c.args}
        for sub in ast.walk(node):
            found = self.found
            if id(sub) in probes:
                continue
            if id(sub) in branches:
                try_node, branch, n = branches[id(sub)]
                found = self.alternatives.setdefault((mod.path, id(try_node)), [set() for _ in range(n)])[branch]
                if branch:  # a handler: only its vLLM imports count
                    if isinstance(sub, ast.Import):
                        found.update((a.name, None) for a in sub.names if a.name.split(".")[0] == "vllm")
                    elif isinstance(sub, ast.ImportFrom) and sub.module and not sub.level \
                            and sub.module.split(".")[0] == "vllm":
                        found.update((sub.module, a.name) for a in sub.names)
                    continue
            if isinstance(sub, ast.Import):
                for a in sub.names:
                    if a.name.split(".")[0] == "vllm":
                        found.add((a.name, None))
                    elif (path := self._our_module_path(a.name)) is not None:
                        self.module(path)
            elif isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                if sub.module.split(".")[0] == "vllm":
                    found.update((sub.module, a.name) for a in sub.names)
                elif (path := self._our_module_path(sub.module)) is not None:
                    self.module(path)  # its top level runs; its functions when called
                    for a in sub.names:  # a module of ours imported by name
                        if (sub_path := self._our_module_path(f"{sub.module}.{a.name}")) is not None:
                            self.module(sub_path)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                self.definition(mod, sub.id)
                if sub.id in mod.imported:
                    other_name, name = mod.imported[sub.id]
                    if (path := self._our_module_path(other_name)) is not None:
                        self.definition(self.module(path), name)
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in aliases:
                found.add((aliases[sub.value.id], sub.attr))
            elif isinstance(sub, ast.Call) and _is_setattr(sub) and len(sub.args) >= 2:
                target, attr = sub.args[0], sub.args[1]
                if isinstance(target, ast.Name) and target.id in aliases and isinstance(attr, ast.Constant) \
                        and isinstance(attr.value, str):
                    found.add((aliases[target.id], attr.value))
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                self._string(sub.value, found)

    def _string(self, text: str, found: set[tuple[str, str | None]]) -> None:
        for m in _CODE_IMPORT.finditer(text):
            if m.group(3):
                found.add((m.group(3), None))
            else:
                for item in m.group(2).strip("() \t\n").split(","):
                    name = item.split()[0] if item.split() else ""
                    if name:
                        found.add((m.group(1), name))
        if _DOTTED.fullmatch(text.strip()):
            module, _, name = text.strip().rpartition(".")
            found.add((module, name))

    def _aliases(self, mod: _Module) -> dict[str, str]:
        """Names bound to vLLM modules anywhere in ``mod`` (``import vllm.a.b
        as m``, ``from vllm.a import b``: ``b`` a submodule or a name; the
        base decides which, so only module-shaped bindings are kept here)."""
        out = {}
        for sub in ast.walk(mod.tree):
            if isinstance(sub, ast.Import):
                for a in sub.names:
                    if a.name.split(".")[0] == "vllm" and a.asname:
                        out[a.asname] = a.name
            elif isinstance(sub, ast.ImportFrom) and sub.module and sub.module.split(".")[0] == "vllm":
                for a in sub.names:
                    out.setdefault(a.asname or a.name, f"{sub.module}.{a.name}")
        return out


def _import_handlers(node: ast.Try) -> list[ast.ExceptHandler]:
    """The ``except ImportError`` (or ``ModuleNotFoundError``) handlers of ``node``."""
    return [h for h in node.handlers if isinstance(h.type, ast.Name)
            and h.type.id in ("ImportError", "ModuleNotFoundError")]


def _import_blocks(node: ast.Try) -> list[list[ast.stmt]]:
    """The alternative blocks of a ``try`` with ``except ImportError``
    handlers: its body, then each handler's body, where a handler holding
    only such a ``try`` gives that ``try``'s blocks in its place (a third
    home, 0.34.0's, nested in the handler of the second)."""
    blocks = [node.body]
    for handler in _import_handlers(node):
        inner = handler.body[0] if len(handler.body) == 1 else None
        if isinstance(inner, ast.Try) and _import_handlers(inner):
            blocks += _import_blocks(inner)
        else:
            blocks.append(handler.body)
    return blocks


def _import_alternatives(tree: ast.AST) -> dict[int, tuple[ast.Try, int, int]]:
    """For the nodes of ``tree`` inside a ``try`` that has ``except
    ImportError`` (or ``ModuleNotFoundError``) handlers, ids of those nodes
    -> (the ``try``, 0 in its body or i in its i-th alternative block, the
    number of blocks: ``_import_blocks``): the homes of names releases keep
    in different modules. A ``try`` nested alone in such a handler is one
    of the outer ``try``'s blocks; any other inner ``try`` wins."""
    out: dict[int, tuple[ast.Try, int, int]] = {}
    nested: set[int] = set()
    for node in ast.walk(tree):  # outer before inner: an inner try overrides
        if not isinstance(node, ast.Try) or id(node) in nested or not _import_handlers(node):
            continue
        blocks = _import_blocks(node)
        for branch, stmts in enumerate(blocks):
            for stmt in stmts:
                for n in ast.walk(stmt):
                    out[id(n)] = (node, branch, len(blocks))
        nested.update(id(t) for t in _flattened_tries(node))
    return out


def _flattened_tries(node: ast.Try) -> list[ast.Try]:
    """The tries ``_import_blocks`` flattens into ``node``'s blocks: each
    nested alone in one of its ``except ImportError`` handlers, at any depth."""
    out = []
    for handler in _import_handlers(node):
        inner = handler.body[0] if len(handler.body) == 1 else None
        if isinstance(inner, ast.Try) and _import_handlers(inner):
            out += [inner, *_flattened_tries(inner)]
    return out


def _top_level_defs(stmts: list[ast.stmt]) -> list[ast.AST]:
    """Functions and classes defined at a module's top level, also under
    ``if``/``try`` (a test module may define its tests in an ``if`` block)."""
    out = []
    for s in stmts:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(s)
        elif isinstance(s, (ast.If, ast.Try)):
            for block in ("body", "orelse", "finalbody"):
                out += _top_level_defs(getattr(s, block, []))
            for handler in getattr(s, "handlers", []):
                out += _top_level_defs(handler.body)
    return out


def _is_find_spec(call: ast.Call) -> bool:
    """``find_spec(...)`` or ``<module>.find_spec(...)`` (importlib.util's)."""
    f = call.func
    return (isinstance(f, ast.Name) and f.id == "find_spec") or (isinstance(f, ast.Attribute) and f.attr == "find_spec")


def _is_setattr(call: ast.Call) -> bool:
    f = call.func
    return isinstance(f, ast.Attribute) and f.attr == "setattr"


def _split_node(node: str) -> tuple[str, list[str]]:
    path, *parts = node.split("::")
    return path, [re.sub(r"\[.*\]$", "", p) for p in parts]


def reached_names(node: str, root: Path = REPO) -> set[tuple[str, str | None]]:
    """``(vllm module, name or None)`` for everything the test ``node`` (a
    pytest node id relative to ``root``) reaches (see the module docstring),
    taking the body of each ``try`` with ``except ImportError`` handlers, not
    the handlers. Raises ``FileNotFoundError`` for a test file that is not
    there and ``KeyError`` for a test the module does not define."""
    reach = _reach(node, root)
    return reach.found.union(*(branches[0] for branches in reach.alternatives.values()))


def _reach(node: str, root: Path) -> _Reach:
    """What the test ``node`` reaches (``reached_names``), with the
    alternatives of its ``try``/``except ImportError`` blocks apart."""
    path, parts = _split_node(node)
    reach = _Reach(root)
    mod = reach.module(root / path)
    target: ast.AST = mod.tree
    for part in parts:
        body = _top_level_defs(target.body) if hasattr(target, "body") else []
        found = next((n for n in body if n.name == part), None)
        if found is None:
            raise KeyError(f"{node}: {path} defines no {part}")
        target = found
    reach.code(mod, target)
    funcs = [target] if isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
    for func in funcs:
        for arg in func.args.args:
            reach.fixture(mod, arg.arg)
    # fixtures requested by fixtures
    done: set[tuple[Path, str]] = set()
    while True:
        pending = [(p, n) for p, n in reach.seen - done]
        if not pending:
            break
        for p, n in pending:
            done.add((p, n))
            d = reach.modules[p].defs.get(n)
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    _decorator_name(dec) == "fixture" for dec in d.decorator_list):
                for arg in d.args.args:
                    reach.fixture(reach.modules[p], arg.arg)
    return reach


def _decorator_name(dec: ast.AST) -> str:
    node = dec.func if isinstance(dec, ast.Call) else dec
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


class BaseSources:
    """The Python sources of a base (a directory holding ``vllm/``): does a
    module exist, does it define a name."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._names: dict[str, tuple[set[str], set[str], bool]] = {}

    def module_file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def _scan(self, module: str) -> tuple[set[str], set[str], bool]:
        """(names bound at top level, string constants, has a module __getattr__)."""
        if module not in self._names:
            path = self.module_file(module)
            self._names[module] = (set(), set(), False)
            if path is None:
                return self._names[module]
            tree = ast.parse(path.read_text(errors="replace"))
            names: set[str] = set()
            stars: list[str] = []
            getattr_ = False

            def visit(stmts):
                nonlocal getattr_
                for s in stmts:
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        names.add(s.name)
                        getattr_ |= s.name == "__getattr__"
                    elif isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                        for t in (s.targets if isinstance(s, ast.Assign) else [s.target]):
                            names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
                    elif isinstance(s, ast.Import):
                        names.update((a.asname or a.name.split(".")[0]) for a in s.names)
                    elif isinstance(s, ast.ImportFrom):
                        for a in s.names:
                            if a.name == "*":
                                stars.append(_resolve(module, path, s))
                            else:
                                names.add(a.asname or a.name)
                    elif isinstance(s, (ast.If, ast.Try, ast.With)):
                        for block in ("body", "orelse", "finalbody"):
                            visit(getattr(s, block, []))
                        for h in getattr(s, "handlers", []):
                            visit(h.body)
            visit(tree.body)
            strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            self._names[module] = (names, strings, getattr_)
            for star in stars:
                names |= self._scan(star)[0]
        return self._names[module]

    def defines(self, module: str, name: str | None) -> bool:
        """Whether the base has module ``module`` (``name`` None) or the name
        ``name`` in it (see the module docstring for what counts)."""
        if self.module_file(module) is None:
            return False
        if name is None or self.module_file(f"{module}.{name}") is not None:
            return True
        names, strings, getattr_ = self._scan(module)
        return name in names or (getattr_ and name in strings)


def _resolve(module: str, path: Path, imp: ast.ImportFrom) -> str:
    if not imp.level:
        return imp.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = package[: len(package) - imp.level + 1]
    return ".".join([*package, *([imp.module] if imp.module else [])])


def unknown_names(node: str, sources: BaseSources, root: Path = REPO) -> list[str]:
    """The vLLM names test ``node`` reaches that ``sources`` (a base's
    unpatched sources) do not define, as ``module.name`` (``module`` for a
    missing module), sorted. Of a ``try`` with ``except ImportError``
    handlers, the body's names when neither they nor the vLLM imports of one
    of those handlers are all defined (see the module docstring)."""
    reach = _reach(node, root)
    out = _undefined(reach.found, sources)
    for body, *handlers in reach.alternatives.values():
        missing = _undefined(body, sources)
        if missing and not any(imports and not _undefined(imports, sources) for imports in handlers):
            out |= missing
    return sorted(out)


def _undefined(names: set[tuple[str, str | None]], sources: BaseSources) -> set[str]:
    """Those of ``names`` (``reached_names``) ``sources`` do not define, as
    ``unknown_names`` reports them."""
    out = set()
    for module, name in names:
        if sources.defines(module, None):
            if name is not None and not sources.defines(module, name):
                out.add(f"{module}.{name}")
            continue
        # not a module: an object of one (``from vllm.a import Cls`` then
        # ``Cls.attr``), whose attributes are not followed; the object must exist
        parent, _, last = module.rpartition(".")
        if not (parent and sources.defines(parent, None) and sources.defines(parent, last)):
            out.add(module if not parent or not sources.defines(parent, None) else f"{parent}.{last}")
    return out


def base_sources(base: Base) -> BaseSources:
    """The unpatched Python sources of ``base``'s cpu flavor: its wheel's
    (fetched, cached, extracted once beside the drift releases' sources), or
    for a flavor compiled from the sdist, the sdist's package
    (``scripts.series.source_build.sdist_package``, nothing compiled)."""
    from scripts.series.base import fetch, sha256_file
    from scripts.series.drift.releases import Fetched, release_sources

    if base.build("cpu").source == "sdist":
        from scripts.series.source_build import sdist_package

        return BaseSources(sdist_package(base))
    art = base.artifact("cpu")
    path = fetch(art)
    return BaseSources(release_sources(Fetched(art.project, art.version, path, art.sha256 or sha256_file(path))))


def lint_mapped_imports(base: Base, root: Path = REPO, sources: BaseSources | None = None) -> list[str]:
    """Problems of the line's ``tests.toml`` (``base.dir``): every mapped test
    that reaches a vLLM name the line's unpatched base does not define (a
    name only the series defines, so the test fails on every release
    whatever it carries). Empty without a tests map."""
    tests_toml = base.dir / "tests.toml"
    if not tests_toml.exists():
        return []
    table = tomllib.loads(tests_toml.read_text()).get("tests", {})
    sources = sources or base_sources(base)
    problems = []
    for patch, nodes in table.items():
        for node in nodes:
            try:
                missing = unknown_names(node, sources, root)
            except (FileNotFoundError, KeyError) as e:
                problems.append(f"{tests_toml.name}: {patch}: {node}: {e}")
                continue
            if missing:
                problems.append(
                    f"{tests_toml.name}: {patch}: {node} reaches {', '.join(missing)}, which the unpatched base "
                    f"{base.version} does not define (only the series does): it fails on every release whatever "
                    "the release carries; map tests that reach the behaviour through names upstream has "
                    "(public API, upstream's own seams)")
    return problems
