"""The drift reports: ``drift.json`` and ``drift.xml`` (JUnit) through
``scripts.common.reports``, the terminal table and details, the exit status."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

from scripts.common.paths import REPORTS
from scripts.common.reports import JUnitCase, Suite, junit, write_reports
from scripts.series.drift.classify import STATUSES, TargetReport


def exit_status(reports: list[TargetReport]) -> int:
    """1 when some patch ``conflicts`` on some target, else 0."""
    return 1 if any(r.needs_maintainer() for r in reports) else 0


def to_json(reports: list[TargetReport], base_version: str, series: list[str]) -> dict:
    """The JSON report: ``{"base", "series", "targets": [{"name", "kind",
    "version", "source", "results": [{"patch", "status", "reason", "hunks"}]}],
    "needs_maintainer": [{"target", "patch"}], "exit_status"}``."""
    return {
        "base": base_version,
        "series": series,
        "statuses": list(STATUSES),
        "targets": [{**{k: v for k, v in dataclasses.asdict(t).items() if k != "results"},
                     "results": [dataclasses.asdict(r) for r in t.results]} for t in reports],
        "needs_maintainer": [{"target": t.name, "patch": r.patch}
                             for t in reports for r in t.needs_maintainer()],
        "exit_status": exit_status(reports),
    }


def to_junit(reports: list[TargetReport]) -> ET.ElementTree:
    """JUnit XML (``scripts.common.reports.junit``) under a ``testsuites``
    root named ``drift``: a ``testsuite`` per target (``drift <target>``), a
    ``testcase`` per patch (classname ``drift.<target>``); ``conflicts`` is a
    ``failure`` naming the hunks, ``upstream`` and ``obsolete`` are
    ``skipped`` with the reason; ``system-out`` holds the status and detail."""
    outcome = {"conflicts": "failure", "upstream": "skipped", "obsolete": "skipped"}
    suites = []
    for t in reports:
        cases = []
        for r in t.results:
            detail = "\n".join([r.reason, *r.hunks])
            cases.append(JUnitCase(f"drift.{t.name}", r.patch, outcome.get(r.status, "passed"),
                                   message=f"{r.status}: {r.reason}", detail=detail, output=f"{r.status}: {detail}"))
        suites.append(Suite(f"drift {t.name}", cases))
    return junit(suites, name="drift")


def table(reports: list[TargetReport], series: list[str]) -> str:
    """A plain-text table: one row per patch, one column per target."""
    heads = ["patch", *[t.name for t in reports]]
    rows = []
    for name in series:
        row = [name.removesuffix(".patch")]
        for t in reports:
            row.append(next((r.status for r in t.results if r.patch == name), "-"))
        rows.append(row)
    widths = [max(len(x) for x in col) for col in zip(heads, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(line.rstrip() for line in [fmt.format(*heads), fmt.format(*("-" * w for w in widths)),
                                                *(fmt.format(*row) for row in rows)])


def details(reports: list[TargetReport]) -> str:
    """Every non-``applies`` result with its reason and hunks, per target."""
    out = []
    for t in reports:
        for r in t.results:
            if r.status != "applies":
                out.append(f"{t.name}: {r.patch}: {r.status}: {r.reason}")
                out.extend(f"    {h}" for h in r.hunks)
    return "\n".join(out)


def write_drift_reports(reports: list[TargetReport], base_version: str, series: list[str],
                        out_dir: Path = REPORTS) -> tuple[Path, Path]:
    """Write ``drift.json`` (``to_json``) and ``drift.xml`` (``to_junit``)
    into ``out_dir`` with ``scripts.common.reports.write_reports``; returns
    both paths."""
    jpath, xpath = write_reports({"drift.json": to_json(reports, base_version, series),
                                  "drift.xml": to_junit(reports)}, out_dir)
    return jpath, xpath
