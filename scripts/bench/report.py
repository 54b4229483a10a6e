"""Reports of ``make bench`` (``scripts.bench.cli``): ``reports/bench.json``, three
PNG plots (throughput bars per system; ColBERT documents per second and time
per call against N, log-log with a linear fit; pooling overhead against
requests per step), ``reports/bench.md`` and the tables printed last (the
embed table once per thread setting, with the ``MRV2 / fastest peer`` line,
``peer_line``).

``report(results, out_dir)`` takes the dict ``scripts.bench.cli`` builds; every
section is optional, so a partial run (``--sections``) reports what it has.
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts.bench.engines import ST
from scripts.common.reports import write_reports

COLORS = {"v1": "#4c72b0", "mrv2-interpreter": "#dd8452", "mrv2": "#55a868", ST: "#8c8c8c",
          "onnxruntime": "#c44e52", "openvino": "#8172b2"}


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

def _ok(results: dict, key: str) -> dict | None:
    """Section ``key`` when it ran without error."""
    sec = results.get(key)
    return sec if sec and "error" not in sec else None


def _embed_settings(results: dict) -> dict:
    """Thread setting -> the embed section's figures for it."""
    return (_ok(results, "embed") or {}).get("threads") or {}


def _systems(results: dict) -> dict:
    """System -> what it said when it opened, from the first section that opened it."""
    seen: dict = {}
    for sec in [*_embed_settings(results).values(), results.get("token_embed") or {}, results.get("colbert") or {}]:
        for name, info in (sec.get("systems") or {}).items():
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
    """One line on what system ``name`` was (engine: runner, threads, vLLM; peer: library, settings)."""
    if "error" in info:
        return f"{name}: not measured ({info['error'][:160]})"
    if "runner" not in info:
        how = f"{info.get('system', name)} {info.get('version', '')}".strip()
        if info.get("torch"):
            how += f" (torch {info['torch']})"
        how += f"; {info.get('threads') or 'default'} thread(s), batches of {info.get('batch_size')} sorted by length"
        if info.get("inference_precision"):
            how += f", inference precision {info['inference_precision']}"
        return f"{name}: {how}"
    how = info["runner"]
    if info["runner"] == "MRV2":
        if info.get("native_input_prep"):
            how += ", native input preparation"
        elif info.get("triton_via_interpreter"):
            how += ", Triton interpreter"
        else:
            how += ", Triton"
    how += (f"; TRITON_INTERPRET={info.get('triton_interpret_env') or 'unset'}; {info.get('torch_threads')} worker "
            f"thread(s); vLLM {info.get('vllm', '?')} from {info.get('vllm_path', '?')}")
    mark = "" if info.get("runner_as_requested", True) else f" (* {info['requested']} requested, {info['runner']} ran)"
    return f"{name}: {how}{mark}"


def _fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def _parts(total: float | None, parts: dict, digits: int) -> str:
    """``total (label part, ...)``, the parts largest first (those under 0.5% left out)."""
    if total is None:
        return "n/a"
    shown = [(k, v) for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.005 * abs(total)]
    if len(shown) <= 1:
        return _fmt(total, digits)
    return f"{_fmt(total, digits)} ({', '.join(f'{k} {_fmt(v, digits)}' for k, v in shown)})"


def peer_line(name: str, versus: dict) -> str:
    """The ``MRV2 / fastest peer`` line of one MRV2 system: its ratio to the
    fastest of ONNX Runtime and OpenVINO in sentences/s and in sentences per
    CPU second, naming that peer and its figure (``versus``:
    ``scripts.bench.sections.versus_fastest_peer``)."""
    from scripts.bench.sections import PEER_LABELS

    label = name.replace("mrv2", "MRV2", 1)
    parts = []
    for metric, unit in (("per_s", "sentences/s"), ("per_cpu_s", "sentences per CPU-second")):
        v = versus.get(metric)
        if v:
            parts.append(f"{unit} {v['ratio']:.2f} (fastest peer: {PEER_LABELS.get(v['peer'], v['peer'])}, "
                         f"{_fmt(v['peer_value'])}; {label} {_fmt(v['value'])})")
    return f"{label} / fastest peer: " + ("; ".join(parts) if parts else "no peer measured")


def embed_table(sec: dict, sentences: int) -> list[str]:
    """Markdown lines of one thread setting of the embed section: a row per
    system, then the ratio lines."""
    from scripts.bench.sections import COSINE_MIN

    runs, memory, idle = sec.get("runs", {}), sec.get("memory", {}), sec.get("idle_cpu_per_s", {})
    cos, ach = sec.get("cosine_min", {}), (sec.get("flops") or {}).get("achieved", {})
    header = ["system", "sentences/s", "sentences per CPU-s", "CPU-s per call (all processes)",
              "peak RSS MiB (all processes)", "idle CPU-s/s", "min cosine vs ST", "TFLOP/s (of matmul)"]
    rows = []
    for name, info in sec.get("systems", {}).items():
        r = runs.get(name)
        if r is None:
            rows.append([f"{name}{_mark(info)}", *["n/a"] * (len(header) - 1)])
            continue
        c = cos.get(name)
        cell = "reference" if name == ST else ("n/a" if c is None else f"{c:.7f}" + ("" if c >= COSINE_MIN else " !"))
        m = memory.get(name) or {}
        a = ach.get(name)
        rows.append([f"{name}{_mark(info)}", _fmt(r["per_s"]), _fmt(r.get("per_cpu_s")),
                     _parts(r.get("cpu_s"), r.get("cpu_by_process", {}), 2),
                     _parts(m.get("total_mib"), m.get("by_process", {}), 0), _fmt(idle.get(name), 2), cell,
                     f"{a['tflops']:.3f} ({a['fraction_of_matmul']:.0%})" if a else "n/a"])
    threads = sec.get("threads")
    out = ["", f"embed, {sentences} sentences, {threads or 'default'} thread(s) per system:", _table(header, rows)]
    out += [peer_line(name, v) for name, v in (sec.get("versus_fastest_peer") or {}).items()]
    rat = sec.get("ratios") or {}
    if rat:
        out.append("ratios (sentences/s): " + ", ".join(f"{k.replace(ST, 'ST')} {v:.2f}" for k, v in rat.items()))
    if any(c < COSINE_MIN for c in cos.values()):
        out.append(f"! below the required cosine {COSINE_MIN} with sentence-transformers")
    return out


def summary(results: dict) -> str:
    """The Markdown summary: machine and its load, the systems, the embed
    tables (one per thread setting), token_embed, ColBERT, pooling
    overhead, serving."""
    m = results.get("machine", {})
    systems = _systems(results)
    load = m.get("load_average_at_start")
    lines = [f"machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB; "
             f"torch {m.get('torch')}, vLLM {m.get('vllm')}; series: {m.get('series_status')}"]
    if load:
        end = m.get("load_average_at_end")
        lines.append(f"load average (1, 5, 15 min) at the start {', '.join(f'{x:.1f}' for x in load)}"
                     + (f"; at the end {', '.join(f'{x:.1f}' for x in end)}" if end else ""))
    settings = _embed_settings(results)
    first = next(iter(settings.values()), {})
    flops = first.get("flops")
    if flops:
        runs = flops["matmul_runs"]
        lines.append(f"fp32 matmul rate ({flops['probe']}'s worker, {runs[0]['size']}^2, {runs[0]['threads']} "
                     f"thread(s)): {flops['matmul_tflops']:.3f} TFLOP/s; MiniLM forward over the sentences: "
                     f"{results['embed']['model_tflop']:.3f} TFLOP")
    lines += [f"- {_describe(n, i)}" for n, i in systems.items()]
    if settings:
        lines.append(f"- each system is a process of its own: CPU-s per call sums user+system time of all its "
                     f"processes (vLLM: front end with the engine core, worker) from the request to {1.1} s after the "
                     "answer; peak RSS sums each process's VmHWM (an upper bound: shared pages count in each)")
    if "run_seconds" in results:
        lines.append(f"run time: {results['run_seconds'] / 60:.1f} min")
    out = lines
    failed = [f"{k}: {results[k]['error']}" for k in ("embed", "token_embed", "colbert", "overhead", "serve")
              if "error" in (results.get(k) or {})]
    out += [f"section failed: {f}" for f in failed]
    for sec in settings.values():
        out += embed_table(sec, results["embed"]["sentences"])
    te = _ok(results, "token_embed")
    if te:
        header = ["system", "sentences/s", "tokens/s", "sentences per CPU-s", "CPU-s per call (all processes)",
                  "peak RSS MiB (all processes)"]
        rows = []
        for name, info in te["systems"].items():
            r, mem = te["runs"].get(name), te.get("memory", {}).get(name) or {}
            rows.append([f"{name}{_mark(info)}", *((_fmt(r["per_s"]), _fmt(r["tokens_per_s"], 0), _fmt(r["per_cpu_s"]),
                                                    _parts(r["cpu_s"], r["cpu_by_process"], 2)) if r else ["n/a"] * 4),
                         _parts(mem.get("total_mib"), mem.get("by_process", {}), 0)])
        out += ["", f"token_embed, {te['sentences']} sentences, {te.get('threads') or 'default'} thread(s):",
                _table(header, rows)]
        if te.get("ratios"):
            out.append("ratios (sentences/s): " + ", ".join(f"{k.replace(ST, 'ST')} {v:.2f}"
                                                           for k, v in te["ratios"].items()))
    col = _ok(results, "colbert")
    if col:
        per = col["per_engine"]
        cols = list(per)
        rows = []
        for n in col["doc_counts"]:
            rows.append([f"score, 1 query + {n} docs", "docs/s",
                         *[_fmt(per[c]["runs"][str(n)]["docs_per_s"]) for c in cols]])
            rows.append(["", "CPU-s per call", *[_fmt(per[c]["runs"][str(n)]["cpu_s"], 3) for c in cols]])
        rows.append(["score, cost growth", "log-log slope N>=64",
                     *[_fmt(per[c]["growth"].get("loglog_slope_large"), 2) for c in cols]])
        rows.append(["score", "query encodings/call", *[_fmt(per[c]["query_encodings_per_call"], 2) for c in cols]])
        out += ["", f"ColBERT ({col['model']}), {col.get('threads') or 'default'} thread(s):",
                _table(["workload", "unit", *[f"{c}{_mark(col['systems'].get(c))}" for c in cols]], rows)]
    if any(_mark(i) == "*" for i in systems.values()):
        out.append("* that engine ran another runner than the one requested (see its line above)")
    ov = _ok(results, "overhead")
    if ov:
        variants = list(dict.fromkeys(r["variant"] for r in ov["rows"]))
        sizes = list(dict.fromkeys(r["requests"] for r in ov["rows"]))
        cell = {(r["variant"], r["requests"]): r for r in ov["rows"]}
        orows = []
        for n in sizes:
            orows.append([str(n), *[_overhead_cell(c) if (c := cell.get((v, n))) else "" for v in variants]])
        out += ["", f"pooling host time per step, MRV2/V1 (MRV2 us / V1 us, median; MRV2 us alone where the "
                    f"base has no V1; {ov.get('torch_threads')} thread(s)):", _table(["requests/step", *variants], orows)]
    serve = _ok(results, "serve")
    if serve:
        from scripts.bench.server import summary_lines

        out += summary_lines(serve)
    return "\n".join(out)


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
    if _embed_settings(results) or _ok(results, "token_embed"):
        paths.append(_plot_throughput(results, out_dir / "bench-throughput.png"))
    if _ok(results, "colbert"):
        paths.append(_plot_colbert(results["colbert"], out_dir / "bench-colbert.png"))
    if _ok(results, "overhead"):
        paths.append(_plot_overhead(results["overhead"], out_dir / "bench-overhead.png"))
    return paths


def _plot_throughput(results: dict, path: Path) -> Path:
    """Bars: sentences/s of each system, one panel per embed thread setting
    and one for token_embed; labels give sentences per CPU second."""
    import matplotlib.pyplot as plt

    panels = [(f"embed, {k} thread(s)", sec) for k, sec in _embed_settings(results).items()]
    if _ok(results, "token_embed"):
        panels.append(("token_embed", results["token_embed"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    for ax, (title, sec) in zip(axes[0], panels):
        names = [n for n in sec.get("runs", {})]
        vals = [sec["runs"][n]["per_s"] for n in names]
        bars = ax.bar(range(len(names)), vals, color=[COLORS.get(n.split("@")[0], "#999999") for n in names])
        for bar, name, v in zip(bars, names, vals):
            info = sec["systems"].get(name, {})
            label = f"{v:.0f}\n{_fmt(sec['runs'][name].get('per_cpu_s'))}/CPU-s"
            if _mark(info) == "*":
                bar.set_hatch("//")
                label += f"\n(ran {info['runner']})"
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)), [n.replace("-interpreter", "\ninterpreter").replace("@", "\n@")
                                          for n in names], fontsize=7)
        ax.set_ylabel("sentences / s")
        ax.set_ylim(0, max(vals or [1]) * 1.35)
        ax.set_title(title, fontsize=10)
    fig.suptitle("all-MiniLM-L6-v2 on the CPU, each system in its own process, side by side (median)", fontsize=11)
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
        star = " (ran " + col["systems"][name]["runner"] + ")" if _mark(col["systems"].get(name)) == "*" else ""
        ax1.plot(n, docs_s, "o-", color=COLORS.get(name.split("@")[0]), label=name + star)
        ax2.plot(n, secs, "o", color=COLORS.get(name.split("@")[0]),
                 label=f"{name}{star}: slope {growth.get('loglog_slope_large', growth['loglog_slope']):.2f}")
        grid = np.logspace(0, np.log10(n.max()), 50)
        ax2.plot(grid, growth["fixed_s"] + growth["per_doc_s"] * grid, "--", color=COLORS.get(name.split("@")[0]),
                 lw=1)
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


def _overhead_cell(c: dict) -> str:
    """``ratio (MRV2 us/V1 us)``, or ``MRV2 us`` where the base has no V1 (``v1_us`` None)."""
    if c["v1_us"] is None:
        return f"{c['mrv2_us']:.0f}"
    return f"{c['ratio_mrv2_v1']:.2f} ({c['mrv2_us']:.0f}/{c['v1_us']:.0f})"


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
        if all(r["v1_us"] is not None for r in rows):
            ax.plot(x, [r["v1_us"] for r in rows], "s-", color=COLORS["v1"], label="V1")
        ax.plot(x, [r["pooler_us"] for r in rows], ":", color="#444444", label="pooler alone")
        for r in rows:
            if r["ratio_mrv2_v1"] is None:
                continue
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
