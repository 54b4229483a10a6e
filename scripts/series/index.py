"""PEP 503 simple indexes of the distribution's wheels, one per flavor
(``make index``), that a platform team serves from any static web server.

Both flavors are the distribution ``vllm`` at the same public version (the
CPU wheel's local version ends in ``.cpu``, as upstream's CPU builds do), so
one index holding both would give a GPU machine whichever sorts higher (the
CPU wheel). As PyTorch does (``…/whl/cpu``, ``…/whl/cu128``), each flavor has
its own index::

    index/cpu/index.html              the project list (``vllm``)
    index/cpu/vllm/index.html         a link per wheel, #sha256=, data-requires-python
    index/cpu/vllm/vllm-0.32.0+mrv2pool.12.cpu-….whl
    index/cuda/...                    the same for the CUDA wheels

``publish`` adds wheels to an index that may hold earlier revisions (pinned
deployments keep finding theirs) and rewrites its pages from the files
there. It refuses a wheel that is not ``vllm``, one of another flavor than
its index, and a file name already published with other bytes (a revision
is never published twice with different content); the index is written in a
staging directory and swapped in, so a refusal or a failure leaves it as it
was.

    python -m scripts.series.index [--out index] WHEEL ...

A user installs with pip (the CPU index's torch comes from PyPI, or from
PyTorch's CPU index with ``--extra-index-url``; README, "Install")::

    pip install --index-url http://HOST/cpu/ --extra-index-url https://pypi.org/simple \\
        'vllm==0.32.0+mrv2pool.12.cpu'
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
import sys
from pathlib import Path

from scripts.common.paths import REPO
from scripts.series.base import DIST_NAME, sha256_file, wheel_metadata

INDEX = REPO / "index"


class IndexRefused(ValueError):
    """A wheel the index refuses; the message names the wheel and the fix."""


def flavor_of(wheel: Path) -> str:
    """``"cpu"`` for a wheel whose local version ends in ``.cpu`` (or is
    ``cpu``), else ``"cuda"``: how ``Base.flavor_version`` names the flavors."""
    version = wheel.name.split("-")[1]
    local = version.partition("+")[2]
    return "cpu" if local == "cpu" or local.endswith(".cpu") else "cuda"


def _page(title: str, links: list[tuple[str, str, str | None]]) -> str:
    """A PEP 503 page: ``links`` are (href, anchor text, data-requires-python
    or None), unescaped."""
    body = "\n".join(
        f'    <a href="{html.escape(href)}"'
        + (f' data-requires-python="{html.escape(requires)}"' if requires else "")
        + f">{html.escape(text)}</a><br/>" for href, text, requires in links)
    return (f"<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.0\">\n"
            f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n{body}\n  </body>\n</html>\n")


def write_pages(flavor_dir: Path) -> None:
    """``index.html`` of a flavor's index and of its ``vllm/`` from the
    wheels in ``vllm/``: each link carries ``#sha256=`` and, where the wheel
    says it, ``data-requires-python`` (PEP 503)."""
    project = flavor_dir / DIST_NAME
    links = []
    for wheel in sorted(project.glob("*.whl")):
        links.append((f"{wheel.name}#sha256={sha256_file(wheel)}", wheel.name,
                      wheel_metadata(wheel).get("Requires-Python")))
    (project / "index.html").write_text(_page(f"Links for {DIST_NAME}", links))
    (flavor_dir / "index.html").write_text(_page("Simple index", [(f"{DIST_NAME}/", DIST_NAME, None)]))


def publish(wheels: list[Path], out: Path = INDEX) -> dict[str, Path]:
    """Add ``wheels`` to the per-flavor indexes under ``out`` and rewrite their
    pages; returns ``{flavor: its index directory}`` for the flavors
    touched. Raises ``IndexRefused`` (nothing changed) for a wheel that is
    missing, is not the distribution ``vllm``, or whose file name is
    published already with other bytes."""
    by_flavor: dict[str, list[Path]] = {}
    for wheel in wheels:
        if not wheel.is_file():
            raise IndexRefused(f"{wheel}: no such wheel (make wheels builds the line's two)")
        name = wheel_metadata(wheel).get("Name", "")
        if name.lower() != DIST_NAME:
            raise IndexRefused(f"{wheel.name}: the distribution {name!r}, not {DIST_NAME!r}: "
                              "the indexes hold this distribution's wheels only")
        by_flavor.setdefault(flavor_of(wheel), []).append(wheel)
    for flavor, group in by_flavor.items():
        for wheel in group:
            there = out / flavor / DIST_NAME / wheel.name
            if there.exists() and sha256_file(there) != sha256_file(wheel):
                raise IndexRefused(f"{wheel.name}: published already in {out / flavor} with other bytes; "
                                  "a revision is published once: bump the line's revision (base.toml) and "
                                  "build again")
    done = {}
    for flavor, group in by_flavor.items():
        final = out / flavor
        staging = out / f".staging-{flavor}"
        shutil.rmtree(staging, ignore_errors=True)
        if final.exists():
            shutil.copytree(final, staging, copy_function=_link_or_copy)
        (staging / DIST_NAME).mkdir(parents=True, exist_ok=True)
        for wheel in group:
            target = staging / DIST_NAME / wheel.name
            if not target.exists():
                _link_or_copy(wheel, target)
        write_pages(staging)
        old = out / f".old-{flavor}"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        staging.rename(final)
        shutil.rmtree(old, ignore_errors=True)
        done[flavor] = final
    return done


def _link_or_copy(src, dst) -> None:
    """A hard link where ``src`` and ``dst`` share a file system, else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring); exit status 1 with the refusal."""
    parser = argparse.ArgumentParser(prog="python -m scripts.series.index", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=INDEX, help="the indexes' root (default: index/)")
    parser.add_argument("wheels", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        done = publish(args.wheels, args.out)
    except IndexRefused as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for flavor, path in done.items():
        print(f"{flavor}: {path}/ ({len(list((path / DIST_NAME).glob('*.whl')))} wheels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
