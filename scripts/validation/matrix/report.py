"""The validation matrix's results (``MatrixRow``) and reports: ``reports/matrix.md`` (what a reviewer
reads: counts, failures, rows grouped by family, the inventory),
``reports/matrix.json`` and ``reports/matrix-junit.xml`` (one test case per
row), and the runner-selection rows of ``scripts/validation/matrix/selector_cases.py``."""

from __future__ import annotations

import json
import platform
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass

from scripts.common import reports
from scripts.common.paths import REPORTS
from scripts.validation.checkpoints.models import MODELS
from scripts.validation.engine import base_runners
from scripts.validation.matrix.inventory import Entry, inventory, registry_pooling, selector_verdict
from scripts.validation.matrix.real import REAL
from scripts.validation.matrix.rows import CASES
from scripts.validation.matrix.selector_cases import SELECTOR_CASES
from scripts.validation.matrix.tasks import FAMILIES


@dataclass
class MatrixRow:
    """One result: an (architecture, task, runner) of a case, or a real-weight / MTEB check."""

    id: str
    family: str
    architecture: str
    task: str
    runner: str
    ran: str | None  # the runner the worker really built
    input_preparation: str | None  # MRV2's: native / triton / triton-interpreter
    prep: str  # how the inputs were prepared
    reference: str
    metric: str
    value: float | None
    tolerance: float
    passed: bool
    seconds: float
    reason: str | None = None
    known_fault: str | None = None
    cpu_seconds: float | None = None  # CPU time (this process and its reaped children), per row


REFUSED = "refused at start-up"  # the metric of a case the CPU build refuses (MatrixCase.refused)

SELECTIONS: dict[str, tuple[str, str | None]] = {}  # impl -> selector verdict, filled by selector_rows


def selector_rows() -> list[MatrixRow]:
    """One row per selector case: the runner vLLM picks by default for its
    checkpoint (engine config only), against the one it must pick."""
    rows = []
    for sc in SELECTOR_CASES:
        start = time.perf_counter()
        ran, said, reason = None, None, None
        try:
            ran, said = selector_verdict(sc.make(MODELS / (sc.checkpoint or sc.id)), **sc.engine)
            SELECTIONS[sc.impl] = (ran, said)
            if ran != sc.want:
                reason = f"the selector picked {ran}, {sc.want} expected ({sc.why})"
        except Exception as e:
            traceback.print_exc()
            reason = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(MatrixRow(f"{sc.id}/runner-selection/default", sc.family, sc.architecture,
                              "runner selection", "default", ran, None, f"engine config only; expected: {sc.why}",
                              f"selector said: {said or 'nothing (no log line)'}", "selected runner", None, 0.0,
                              reason is None, time.perf_counter() - start, reason, sc.known_fault))
    return rows


def _value(r: MatrixRow) -> str:
    if r.value is None:
        if r.metric == REFUSED:
            return "refused" if r.passed else "-"
        return r.ran or "-" if r.metric == "selected runner" else "-"
    return f"{r.value:.7f}" if r.metric == "min cosine" else f"{r.value:.2g}"


def counts(entries: list[Entry], rows: list[MatrixRow]) -> dict:
    """Architecture counts (implementing classes and registry names) by status."""
    failed_cases = {r.id.split("/")[0] for r in rows if not r.passed}
    mrv2_cases = {r.id.split("/")[0] for r in rows if r.runner == "MRV2"}
    validated = [e for e in entries if e.status == "validated"]
    return {
        "registry classes": len(registry_pooling()),
        "registry names": sum(len(n) for d in registry_pooling().values() for n in d.values()),
        "inventory entries": len(entries),
        "validated": len(validated),
        "validated on MRV2, all rows pass": sum(
            bool(set(e.cases) & mrv2_cases) and not set(e.cases) & failed_cases for e in validated),
        "kept on V1": sum(e.status == "kept on V1" for e in entries),
        "not instantiable offline": sum(e.status == "not instantiable offline" for e in entries),
        "refused on the CPU": sum(e.status == "refused on the CPU" for e in entries),
        "missing": sum(e.status == "MISSING" for e in entries),
    }


def markdown(rows: list[MatrixRow], entries: list[Entry], wall: float) -> str:
    """``matrix.md``: counts, failures first, the rows grouped by family, the inventory."""
    c = counts(entries, rows)
    failed = [r for r in rows if not r.passed]
    out = ["# Validation matrix", "",
           f"{len(rows) - len(failed)} rows passed, {len(failed)} failed; wall time {wall / 60:.1f} min "
           f"({platform.node()}, engines in-process). MRV2 input preparation: "
           f"{next((r.input_preparation for r in rows if r.input_preparation), '-')}.", "",
           f"Registry: {c['registry classes']} pooling implementing classes ({c['registry names']} names); "
           f"inventory {c['inventory entries']} entries (with the adapters the matrix converts): "
           f"validated {c['validated']} (all rows passing on {' and '.join(base_runners())}: "
           f"{c['validated on MRV2, all rows pass']}), kept on V1 {c['kept on V1']}, "
           f"not instantiable offline {c['not instantiable offline']}, refused on the CPU "
           f"{c['refused on the CPU']}, missing {c['missing']}.", ""]
    if failed:
        out += [f"## Failures ({len(failed)})", "", "| row | reason | known fault (lead) |", "| --- | --- | --- |"]
        out += [f"| {r.id} | {(r.reason or '').replace('|', '/')[:300]} | {r.known_fault or ''} |" for r in failed]
        out.append("")
    out += ["## Rows", "", "Max abs error against transformers on the same weights, fp32 (tolerance 1e-4; "
            "real weights: min cosine >= 0.99999).", ""]
    for fam in list(FAMILIES) + sorted({r.family for r in rows} - set(FAMILIES)):
        fam_rows = [r for r in rows if r.family == fam]
        if not fam_rows:
            continue
        out += [f"### {fam}", "", "| architecture | row | runner (ran, prep) | value | verdict | inputs |",
                "| --- | --- | --- | --- | --- | --- |"]
        for r in fam_rows:
            ran = f"{r.ran or '-'}{', ' + r.input_preparation if r.input_preparation else ''}"
            verdict = "pass" if r.passed else "**FAIL**"
            out.append(f"| {r.architecture} | {r.id} | {r.runner} ({ran}) | {_value(r)} | {verdict} | {r.prep} |")
        out.append("")
    out += ["## Inventory", "", "| implementing class | registry names | status | cases / reason |",
            "| --- | --- | --- | --- |"]
    for e in entries:
        why = ", ".join(e.cases) if e.status == "validated" else (e.reason or "")
        if e.status == "refused on the CPU":
            why = f"{why}... (rows: {', '.join(e.cases)})"
        if e.status == "kept on V1" and e.cases:
            why = f"{why} (rows on V1: {', '.join(e.cases)})"
        out.append(f"| {e.impl} | {', '.join(e.names)} | {e.status} | {why.replace('|', '/')} |")
    return "\n".join(out) + "\n"


def junit(rows: list[MatrixRow]) -> ET.ElementTree:
    """``matrix-junit.xml``: one test case per row (class ``matrix.<family>.<runner>``,
    named by the row id); a failed row's failure carries its reason and the row as JSON."""
    return reports.junit([reports.Suite("validation-matrix", [
        reports.JUnitCase(f"matrix.{r.family}.{r.runner}", r.id, "passed" if r.passed else "failure",
                          message=r.reason or "failed", detail="" if r.passed else json.dumps(asdict(r)),
                          seconds=r.seconds) for r in rows])])


def write(rows: list[MatrixRow], selections: list[MatrixRow], wall: float, directory=None,
          update: bool = False) -> None:
    """Write the three reports and print the Markdown. ``update``: the rows
    replace those of the same id in the existing ``matrix.json`` (the others
    and the selector verdicts are kept; the wall time adds up)."""
    directory = directory or REPORTS
    rows = rows + selections
    if update and (directory / "matrix.json").exists():
        old = json.loads((directory / "matrix.json").read_text())
        known = {c.id for c in CASES} | {s.id for s in SELECTOR_CASES} | set(REAL)
        fresh = {r.id: r for r in rows}
        merged = [fresh.pop(r["id"], None) or MatrixRow(**r) for r in old["rows"] if r["id"].split("/")[0] in known]
        rows = merged + list(fresh.values())
        wall += old["wall_seconds"]
        for e in old["inventory"]:
            if e["status"] == "kept on V1" and e["impl"] not in SELECTIONS:
                SELECTIONS[e["impl"]] = ("V1", e["reason"])
    entries = inventory(SELECTIONS)
    md = markdown(rows, entries, wall)
    reports.write_reports({
        "matrix.md": md,
        "matrix.json": {"wall_seconds": wall, "counts": counts(entries, rows), "rows": [asdict(r) for r in rows],
                        "inventory": [asdict(e) for e in entries]},
        "matrix-junit.xml": junit(rows)}, directory)
    print("\n" + md)
    print(f"written {directory / 'matrix.md'}, matrix.json, matrix-junit.xml")
