"""Reports of ``make bench`` (``scripts.bench.cli``): ``reports/bench.json``, three
PNG plots (throughput bars; ColBERT documents per second and time per call
against N, log-log with a linear fit; pooling overhead against requests per
step), ``reports/bench.md`` and the short table printed last.

``report(results, out_dir)`` takes the dict ``scripts.bench.cli`` builds; every
section is optional, so a partial run (``--sections``) reports what it has.
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts.bench.engines import ENGINES, ST
from scripts.common.reports import write_reports

ENGINE_ORDER = tuple(ENGINES)
COLORS = {"v1": "#4c72b0", "mrv2-interpreter": "#dd8452", "mrv2": "#55a868", ST: "#8c8c8c"}


def report(results: dict, out_dir: Path) -> str:
    """Write the PNG plots, ``bench.json`` (``results`` and the plots' names;
    values JSON cannot hold as they are, as ``str``) and ``bench.md`` into
    ``out_dir`` (created); return the Markdown summary (to print last)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = write_plots(results, out_dir)
    results = {**results, "plots": [p.name for p in plots]}
    text = summary(results)
    write_reports({"bench.json": json.loads(json.dumps(results, default=str)), "bench.md": text + "\n"}, out_dir)
    files = ", ".join(str(out_dir / n) for n in ["bench.json", "bench.md", *results["plots"]])
    return f"{text}\n\nwritten {files}"


# --------------------------------------------------------------------------- table

def _engines(results: dict) -> dict:
    """Engine configuration -> what ran, from the first section that opened it."""
    seen: dict = {}
    for key in ("embed", "token_embed", "colbert"):
        for name, info in (results.get(key) or {}).get("engines", {}).items():
            seen.setdefault(name, info)
    return seen


def _mark(info: dict | None) -> str:
    """'' when the engine ran the runner asked for, '*' when not, '!' when it failed to open."""
    if not info:
        return ""
    if "error" in info:
        return "!"
    return "" if info.get("runner_as_requested", True) else "*"


def _describe(name: str, info: dict) -> str:
    if "error" in info:
        return f"{name}: failed to open ({info['error'][:120]})"
    how = info["runner"]
    if info["runner"] == "MRV2":
        if info.get("native_input_prep"):
            how += ", native input preparation"
        elif info.get("triton_via_interpreter"):
            how += ", Triton interpreter"
        else:
            how += ", Triton"
    how += f"; TRITON_INTERPRET={info.get('triton_interpret_env') or 'unset'}; {info.get('torch_threads')} thread(s)"
    mark = "" if info.get("runner_as_requested", True) else f" (* {info['requested']} requested, {info['runner']} ran)"
    return f"{name}: {how}{mark}"


def _fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def _ok(results: dict, key: str) -> dict | None:
    """Section ``key`` when it ran without error."""
    sec = results.get(key)
    return sec if sec and "error" not in sec else None


def summary(results: dict) -> str:
    """The short Markdown summary: machine, engines, one throughput table
    (with ratios) and one overhead table."""
    m = results.get("machine", {})
    engines = _engines(results)
    lines = [f"machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB; "
             f"torch {m.get('torch')}, vLLM {m.get('vllm')}; series: {m.get('series_status')}"]
    flops = (_ok(results, "embed") or {}).get("flops")
    if flops:
        runs = flops["matmul_runs"]
        lines.append(f"fp32 matmul rate (engine worker, {runs[0]['size']}^2, {runs[0]['threads']} thread(s)): "
                     f"{flops['matmul_tflops']:.3f} TFLOP/s; MiniLM forward over the sentences: "
                     f"{flops['model_tflop']:.3f} TFLOP")
    lines += [f"- {_describe(n, engines[n])}" for n in ENGINE_ORDER if n in engines]
    st_threads = next((s["st_threads"] for k in ("embed", "token_embed") if (s := _ok(results, k))
                       and "st_threads" in s), None)
    if st_threads:
        lines.append(f"- {ST}: in the bench process, fp32, `encode(batch_size=64)` (sentences sorted by length, "
                     f"padded per batch; tokenisation inside the timed call), {st_threads} thread(s) (the workers' "
                     f"count); the engines tokenise in their front end (the bench process) and run the model in "
                     f"the worker")
    if any("memory" in (_ok(results, k) or {}) for k in ("embed", "token_embed")):
        lines.append("- peak RSS: an engine's worker + engine core (VmHWM; its front end is the shared bench "
                     f"process, left out); {ST}: a process of its own encoding the sentences once")
    if "run_seconds" in results:
        lines.append(f"run time: {results['run_seconds'] / 60:.1f} min")
    cols = [n for n in ENGINE_ORDER if n in engines] + [ST]
    ratio_cols = ["mrv2/v1", f"mrv2/{ST}", "mrv2-interpreter/v1", f"mrv2-interpreter/{ST}"]
    header = ["workload", "unit", *[f"{c}{_mark(engines.get(c))}" for c in cols],
              *[r.replace(ST, "ST") for r in ratio_cols]]
    rows = []
    for task in ("embed", "token_embed"):
        sec = _ok(results, task)
        if not sec:
            continue
        runs, rat = sec["runs"], sec.get("ratios", {})
        rows.append([f"{task} ({sec['sentences']} sentences)", "sentences/s",
                     *[_fmt(runs.get(c, {}).get("per_s")) for c in cols],
                     *[_fmt(rat.get(r), 2) for r in ratio_cols]])
        rows.append([task, "tokens/s", *[_fmt(runs.get(c, {}).get("tokens_per_s"), 0) for c in cols],
                     *[""] * len(ratio_cols)])
        if sec.get("memory"):
            rows.append([task, "peak RSS MiB", *[_fmt(_peak_mib(sec["memory"].get(c)), 0) for c in cols],
                         *[""] * len(ratio_cols)])
        if task == "embed" and sec.get("flops"):
            ach = sec["flops"]["achieved"]
            rows.append(["embed", "TFLOP/s (of matmul)",
                         *[(f"{ach[c]['tflops']:.3f} ({ach[c]['fraction_of_matmul']:.0%})" if c in ach else "n/a")
                           for c in cols], *[""] * len(ratio_cols)])
    col = _ok(results, "colbert")
    if col:
        per = col["per_engine"]
        for n in col["doc_counts"]:
            vals = {c: per[c]["runs"][str(n)]["docs_per_s"] for c in per}
            rat = {f"{a}/v1": vals[a] / vals["v1"] for a in ("mrv2", "mrv2-interpreter") if a in vals and "v1" in vals}
            rows.append([f"score, 1 query + {n} docs", "docs/s", *[_fmt(vals[c]) if c in vals else "" for c in cols],
                         *[_fmt(rat.get(r), 2) if r in rat else "" for r in ratio_cols]])
        rows.append(["score, cost growth", "log-log slope N>=64",
                     *[_fmt(per[c]["growth"].get("loglog_slope_large"), 2) if c in per else "" for c in cols],
                     *[""] * len(ratio_cols)])
        rows.append(["score", "query encodings/call",
                     *[_fmt(per[c]["query_encodings_per_call"], 2) if c in per else "" for c in cols],
                     *[""] * len(ratio_cols)])
    out = lines
    failed = [f"{k}: {results[k]['error']}" for k in ("embed", "token_embed", "colbert", "overhead", "serve")
              if "error" in (results.get(k) or {})]
    out += [f"section failed: {f}" for f in failed]
    if rows:
        out += ["", _table(header, rows)]
    if any(_mark(engines.get(c)) == "*" for c in cols):
        out.append("* that engine ran another runner than the one requested (see its line above)")
    ov = _ok(results, "overhead")
    if ov:
        variants = list(dict.fromkeys(r["variant"] for r in ov["rows"]))
        sizes = list(dict.fromkeys(r["requests"] for r in ov["rows"]))
        cell = {(r["variant"], r["requests"]): r for r in ov["rows"]}
        orows = []
        for n in sizes:
            orows.append([str(n), *[(f"{c['ratio_mrv2_v1']:.2f} ({c['mrv2_us']:.0f}/{c['v1_us']:.0f})"
                                     if (c := cell.get((v, n))) else "") for v in variants]])
        out += ["", f"pooling host time per step, MRV2/V1 (MRV2 us / V1 us, median, "
                    f"{ov.get('torch_threads')} thread(s)):", _table(["requests/step", *variants], orows)]
    serve = _ok(results, "serve")
    if serve:
        from scripts.bench.server import summary_lines

        out += summary_lines(serve)
    return "\n".join(out)


def _peak_mib(mem: dict | None) -> float | None:
    """Peak resident MiB of one column of a section's ``memory``: an engine's
    worker + engine core, or sentence-transformers' process."""
    if not mem:
        return None
    return mem.get("engine_mib", mem.get("process_mib"))


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- plots

def write_plots(results: dict, out_dir: Path) -> list[Path]:
    """The PNG plots for the sections present; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    paths = []
    if _ok(results, "embed") or _ok(results, "token_embed"):
        paths.append(_plot_throughput(results, out_dir / "bench-throughput.png"))
    if _ok(results, "colbert"):
        paths.append(_plot_colbert(results["colbert"], out_dir / "bench-colbert.png"))
    if _ok(results, "overhead"):
        paths.append(_plot_overhead(results["overhead"], out_dir / "bench-overhead.png"))
    return paths


def _plot_throughput(results: dict, path: Path) -> Path:
    import matplotlib.pyplot as plt

    tasks = [t for t in ("embed", "token_embed") if _ok(results, t)]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.5), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        sec = results[task]
        names = [n for n in (*ENGINE_ORDER, ST) if n in sec["runs"]]
        vals = [sec["runs"][n]["per_s"] for n in names]
        bars = ax.bar(range(len(names)), vals, color=[COLORS[n] for n in names])
        for bar, name, v in zip(bars, names, vals):
            info = sec["engines"].get(name, {})
            label = f"{v:.0f}"
            if name in (sec.get("flops") or {}).get("achieved", {}):
                label += f"\n{sec['flops']['achieved'][name]['fraction_of_matmul']:.0%} of matmul"
            if _mark(info) == "*":
                bar.set_hatch("//")
                label += f"\n(ran {info['runner']})"
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(names)), [n.replace("-interpreter", "\ninterpreter") for n in names], fontsize=8)
        ax.set_ylabel("sentences / s")
        ax.set_ylim(0, max(vals) * 1.3)
        ax.set_title(f"{task}: {sec['sentences']} STS-B sentences, {sec['tokens']} tokens", fontsize=10)
    fig.suptitle("all-MiniLM-L6-v2 on the CPU, side by side in one run (median)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_colbert(col: dict, path: Path) -> Path:
    import matplotlib
    import matplotlib.pyplot as plt
    import numpy as np

    n = np.asarray(col["doc_counts"], dtype=float)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, eng in col["per_engine"].items():
        runs, growth = eng["runs"], eng["growth"]
        docs_s = [runs[str(int(k))]["docs_per_s"] for k in n]
        secs = [runs[str(int(k))]["median_s"] for k in n]
        star = " (ran " + col["engines"][name]["runner"] + ")" if _mark(col["engines"].get(name)) == "*" else ""
        ax1.plot(n, docs_s, "o-", color=COLORS.get(name), label=name + star)
        ax2.plot(n, secs, "o", color=COLORS.get(name),
                 label=f"{name}{star}: slope {growth.get('loglog_slope_large', growth['loglog_slope']):.2f}")
        grid = np.logspace(0, np.log10(n.max()), 50)
        ax2.plot(grid, growth["fixed_s"] + growth["per_doc_s"] * grid, "--", color=COLORS.get(name), lw=1)
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(n, [str(int(k)) for k in n])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax1.set_xlabel("documents per query (N)")
    ax1.set_ylabel("documents / s")
    ax1.set_title("LLM.score, tiny ColBERT: documents per second")
    ax1.legend(fontsize=8)
    ax2.set_xlabel("documents per query (N)")
    ax2.set_ylabel("seconds per score call")
    ax2.set_title("time per call; dashed: linear fit t = a + bN (relative residuals)\n"
                  "(legend: log-log slope over N >= 64)", fontsize=10)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_overhead(ov: dict, path: Path) -> Path:
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r["variant"] for r in ov["rows"]))
    cols = min(3, len(variants))
    rows_n = (len(variants) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.6 * cols, 3.6 * rows_n), squeeze=False)
    for ax, variant in zip(axes.flat, variants):
        rows = [r for r in ov["rows"] if r["variant"] == variant]
        x = [r["requests"] for r in rows]
        ax.plot(x, [r["mrv2_us"] for r in rows], "o-", color=COLORS["mrv2"], label="MRV2")
        ax.plot(x, [r["v1_us"] for r in rows], "s-", color=COLORS["v1"], label="V1")
        ax.plot(x, [r["pooler_us"] for r in rows], ":", color="#444444", label="pooler alone")
        for r in rows:
            ax.annotate(f"{r['ratio_mrv2_v1']:.2f}", (r["requests"], r["mrv2_us"]), textcoords="offset points",
                        xytext=(0, 6), ha="center", fontsize=7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(x, [str(v) for v in x])
        ax.minorticks_off()
        ax.set_title(variant, fontsize=10)
        ax.set_xlabel("requests per step")
        ax.set_ylabel("us per step (median)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(variants):]:
        ax.axis("off")
    fig.suptitle("host time of one pooling step without the model forward (labels: MRV2/V1)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
