"""The one reports writer of the jobs (smoke, matrix, drift, bench, GPU smoke):
Markdown, JSON and JUnit XML files under ``reports/`` (``scripts.common.paths.REPORTS``).

A job builds its results, describes them as JUnit test cases (``JUnitCase``) and
hands every file to ``write_reports``; the file's suffix says how it is written.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from scripts.common.paths import REPORTS

OUTCOMES = ("passed", "failure", "skipped", "error")


@dataclass
class JUnitCase:
    """One JUnit ``testcase``: ``outcome`` one of ``OUTCOMES``; ``message``
    goes into the failure/skipped/error element's attribute, ``detail`` into
    its text, ``output`` into ``system-out``. ``seconds``: wall time."""

    classname: str
    name: str
    outcome: str = "passed"
    message: str = ""
    detail: str = ""
    output: str | None = None
    seconds: float | None = None

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"JUnit outcome {self.outcome!r}: use one of {OUTCOMES}")


@dataclass
class Suite:
    """One JUnit ``testsuite`` of ``cases``."""

    name: str
    cases: list[JUnitCase] = field(default_factory=list)


def junit(suites: list[Suite], name: str | None = None) -> ET.ElementTree:
    """JUnit XML: one ``testsuite`` per suite (counts of tests, failures,
    errors, skipped and the summed time), under a ``testsuites`` root named
    ``name``; with one suite and no ``name``, the suite is the root."""
    elements = []
    for s in suites:
        count = {o: sum(c.outcome == o for c in s.cases) for o in OUTCOMES}
        attrs = {"name": s.name, "tests": str(len(s.cases)), "failures": str(count["failure"]),
                 "errors": str(count["error"]), "skipped": str(count["skipped"])}
        times = [c.seconds for c in s.cases if c.seconds is not None]
        if times:
            attrs["time"] = f"{sum(times):.3f}"
        suite = ET.Element("testsuite", attrs)
        for c in s.cases:
            case = ET.SubElement(suite, "testcase", classname=c.classname, name=c.name,
                                 **({"time": f"{c.seconds:.3f}"} if c.seconds is not None else {}))
            if c.outcome != "passed":
                ET.SubElement(case, c.outcome, message=c.message).text = c.detail or None
            if c.output is not None:
                ET.SubElement(case, "system-out").text = c.output
        elements.append(suite)
    if name is None and len(elements) == 1:
        root = elements[0]
    else:
        root = ET.Element("testsuites", name=name or "")
        root.extend(elements)
    ET.indent(root)
    return ET.ElementTree(root)


def write_reports(files: dict[str, str | dict | list | ET.ElementTree], directory: Path | None = None) -> list[Path]:
    """Write each file into ``directory`` (default ``reports/``, created):
    ``.md``/``.txt``/``.log`` from a ``str``, ``.json`` from a dict or list
    (indented), ``.xml`` from an ``ElementTree`` (``junit(...)``). Each file is
    written whole to a temporary name and renamed, so a reader never sees half
    a report. Returns the paths. Raises ``ValueError`` for another suffix or a
    content of the wrong type."""
    directory = Path(directory or REPORTS)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, content in files.items():
        path = directory / filename
        tmp = path.with_name(path.name + ".tmp")
        suffix = path.suffix
        if suffix in (".md", ".txt", ".log") and isinstance(content, str):
            tmp.write_text(content)
        elif suffix == ".json" and isinstance(content, (dict, list)):
            tmp.write_text(json.dumps(content, indent=2) + "\n")
        elif suffix == ".xml" and isinstance(content, ET.ElementTree):
            content.write(tmp, encoding="utf-8", xml_declaration=True)
        else:
            raise ValueError(f"{filename}: cannot write a {type(content).__name__} as {suffix or 'no suffix'} "
                             "(str for .md/.txt/.log, dict or list for .json, ElementTree for .xml)")
        tmp.replace(path)
        written.append(path)
    return written
