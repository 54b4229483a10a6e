"""The validation matrix (``make matrix``): every pooling architecture of the
base's registry (``scripts/validation/matrix/inventory.py``), each instantiable one checked
task by task (``scripts/validation/matrix/rows.py``) on the runner vLLM picks by default
(asserted: MRV2 unless the selector keeps the model on V1) and on the V1
runner (``VLLM_USE_V2_MODEL_RUNNER=0``), against transformers on the same
weights (``scripts/validation/references.py``), fp32, max abs error <= 1e-4; plus the
real-weight rows (all-MiniLM-L6-v2 against sentence-transformers) and the
MTEB STS rows (STS-B test through ``mteb``, sentence-transformers against
the engine through mteb's ``VllmEncoderWrapper``): ``scripts/validation/matrix/real.py``.
Every engine is opened by ``scripts.validation.engine.vllm_runner``, which
asserts the runner (and MRV2's input preparation) before a row is measured.

Engines run inside this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, one
engine per case and runner, every task of the case through it): start-up
then costs seconds instead of a minute, which is what keeps ~100 engines
under 30 minutes. ``--processes`` runs them as users get them (engine core
and worker processes). Nothing is skipped: a row that cannot run fails with
its reason. Reports: ``reports/matrix.md`` (grouped by family, with the
inventory), ``reports/matrix.json`` and ``reports/matrix-junit.xml``. Exit
status 1 when any row fails.

    python -m scripts.validation.matrix [--rows ID,...] [--cases ID,...] [--list] [--processes]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

from scripts.common.environ import environ
from scripts.validation.checkpoints.models import MODELS
from scripts.validation.engine import (engine_env, expected_input_preparation, input_preparation,
                                       quiet_vllm, runner_in_use, vllm_runner)
from scripts.validation.matrix import report
from scripts.validation.matrix.real import REAL, ROW_IDS
from scripts.validation.matrix.report import REFUSED, MatrixRow
from scripts.validation.matrix.rows import CASES
from scripts.validation.matrix.tasks import MatrixCase, inputs, max_abs_error

# Small models: a 64 MiB KV cache instead of 30% of the node (allocating that is most of a start-up)
ENGINE_DEFAULTS = {"kv_cache_memory_bytes": 64 << 20}


def cpu_time() -> float:
    """CPU seconds used so far by this process and its waited-for children
    (user + system): the cost measure that does not depend on the machine's load."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def use_task(llm, task: str) -> None:
    """Point the offline front-end at ``task``. ``LLM`` serves one pooling
    task per instance (``PoolerConfig.task``, else the model's first
    supported one) and builds input processors for that one only
    (``vllm/entrypoints/pooling/offline.py``, ``factories.py``), although
    its engine serves every supported task, as the server does per request.
    Building the other tasks' processors with the same factory and
    switching between calls runs all of a model's tasks through one engine.
    ``AssertionError`` when the engine does not support ``task``."""
    from vllm.entrypoints.pooling.factories import init_pooling_io_processors

    if task not in llm.supported_tasks:
        raise AssertionError(f"{task} not among the engine's supported tasks {llm.supported_tasks}")
    if task not in llm.pooling_io_processors:
        pooler_config = llm.model_config.pooler_config
        saved, pooler_config.task = pooler_config.task, task
        try:
            llm.pooling_io_processors.update(init_pooling_io_processors(
                llm.supported_tasks, llm.llm_engine.vllm_config, llm.renderer, llm.chat_template_config))
        finally:
            pooler_config.task = saved
    llm.pooling_task = task


def run_case(case: MatrixCase, runners: tuple[str, ...] | None = None) -> list[MatrixRow]:
    """Every (task, runner) row of ``case``: one engine per runner
    (``vllm_runner``: the runner asserted, ``case.default_runner`` by vLLM's default
    choice, V1 by ``VLLM_USE_V2_MODEL_RUNNER=0``), every task through it.
    Never raises: a row that cannot run fails with its reason."""
    if case.refused:
        return refused_rows(case, runners or case.runners)
    rows: list[MatrixRow] = []
    model = refs = None
    setup_wall, setup_cpu = time.perf_counter(), cpu_time()
    try:
        model = case.make(MODELS / (case.checkpoint or case.id))
        refs = {t.name: t.reference(model, inputs(t.inputs)) for t in case.tasks}
    except Exception as e:
        traceback.print_exc()
        setup_error = f"checkpoint or reference: {type(e).__name__}: {e}"
    setup_wall, setup_cpu = time.perf_counter() - setup_wall, cpu_time() - setup_cpu
    print(f"  setup (checkpoint, references): {setup_wall:.1f} s wall, {setup_cpu:.1f} s CPU", flush=True)
    # The Transformers backend decorates transformers' model classes in the process that builds
    # the model (vllm/compilation/decorators.py): keep that out of this process, whose references
    # construct those classes.
    own_process = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"} if case.engine.get("model_impl") == "transformers" else {}
    for runner in runners or case.runners:
        start, start_cpu = time.perf_counter(), cpu_time()
        ran = prep = None
        results: dict[str, tuple[float | None, str | None]] = {}
        try:
            if refs is None:
                raise RuntimeError(setup_error)
            with environ(**own_process), vllm_runner(model, "default" if runner == case.default_runner else "v1",
                                                     want=runner, **{**ENGINE_DEFAULTS, **case.engine}) as llm:
                # what the worker built, asked of it (vllm_runner asserted it is ``runner``)
                ran = runner_in_use(llm)
                prep = input_preparation(llm) if ran == "MRV2" else None
                default_task = llm.pooling_task
                for t in case.tasks:
                    try:
                        use_task(llm, default_task if t.name == "score" else t.name.split(" ")[0])
                        value = max_abs_error(t.run(llm, inputs(t.inputs)), refs[t.name])
                        results[t.name] = (value, None if value <= t.tolerance else
                                           f"max abs error {value:.3g} > {t.tolerance:g}")
                    except Exception as e:
                        traceback.print_exc()
                        results[t.name] = (None, f"{type(e).__name__}: {e}")
        except Exception as e:  # AssertionError: vllm_runner found another runner (or input preparation)
            traceback.print_exc()
            what = "runner" if isinstance(e, AssertionError) else "engine"
            results = {t.name: (None, f"{what}: {type(e).__name__}: {str(e)[:500]}") for t in case.tasks}
        wall, cpu = time.perf_counter() - start, cpu_time() - start_cpu
        print(f"  {runner}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
        seconds, cpu = wall / max(1, len(case.tasks)), cpu / max(1, len(case.tasks))
        for t in case.tasks:
            value, reason = results[t.name]
            rows.append(MatrixRow(f"{case.id}/{t.name}/{runner}", case.family, case.architecture, t.name,
                                  runner, ran, prep, case.prep, t.reference_label, "max abs error", value,
                                  t.tolerance, reason is None, seconds, reason, case.known_fault, cpu))
    return rows


def refused_rows(case: MatrixCase, runners: tuple[str, ...]) -> list[MatrixRow]:
    """The rows of a case the CPU build cannot serve (``case.refused``): one per
    runner, passing when opening the engine raises an error whose message
    starts with ``case.refused``; failing when the engine starts (the model would
    fail its requests instead) or raises another error. Never raises."""
    try:
        model, setup_error = case.make(MODELS / (case.checkpoint or case.id)), None
    except Exception as e:
        traceback.print_exc()
        model, setup_error = None, f"checkpoint: {type(e).__name__}: {e}"
    rows = []
    for runner in runners:
        start, start_cpu = time.perf_counter(), cpu_time()
        try:
            if setup_error:
                raise RuntimeError(setup_error)
            with vllm_runner(model, "default" if runner == case.default_runner else "v1", want=runner,
                             **{**ENGINE_DEFAULTS, **case.engine}) as llm:
                reason = f"the engine started ({runner_in_use(llm)}): {case.refused!r}... expected at start-up"
        except Exception as e:
            said = str(e)
            reason = None if said.startswith(case.refused) else (
                f"another error than {case.refused!r}...: {type(e).__name__}: {said[:400]}")
            if reason:
                traceback.print_exc()
        rows.append(MatrixRow(f"{case.id}/start-up/{runner}", case.family, case.architecture, "start-up", runner,
                              None, None, case.prep, f"refusal: {case.refused}...", REFUSED, None, 0.0,
                              reason is None, time.perf_counter() - start, reason, case.known_fault,
                              cpu_time() - start_cpu))
    return rows


def run_row(row_id: str) -> MatrixRow:
    """One real-weight or MTEB row (``minilm-embed/MRV2``, ``mteb-sts/V1``...)."""
    check_id, runner = row_id.split("/")
    task, metric, tol, reference, measure = REAL[check_id]
    start, start_cpu = time.perf_counter(), cpu_time()
    value, reason = None, None
    ran = None
    try:
        value, ran = measure(runner)
        ok = value >= tol if metric == "min cosine" else value <= tol
        reason = None if ok else f"{metric} {value:.3g} outside tolerance {tol:g}"
    except Exception as e:
        reason = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    return MatrixRow(row_id, "real weights (all-MiniLM-L6-v2)", "BertModel", task, runner, ran,
                     None, "STS-B test sentences, MiniLM tokenizer", reference, metric, value, tol,
                     reason is None, time.perf_counter() - start, reason, None, cpu_time() - start_cpu)


def main(argv=None) -> int:
    """The ``make matrix`` command line (see the module's docstring); the exit status."""
    parser = argparse.ArgumentParser(prog="python -m scripts.validation.matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", help="comma-separated case ids (default: all)")
    parser.add_argument("--rows", help="comma-separated real-weight/MTEB row ids (default: all)")
    parser.add_argument("--list", action="store_true", help="print the case and row ids and exit")
    parser.add_argument("--processes", action="store_true", help="engines in their own processes, as users run them")
    parser.add_argument("--update", action="store_true",
                        help="replace the rows run now in the existing reports, keep the others")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join([c.id for c in CASES] + ROW_IDS))
        return 0
    everything = args.cases is None and args.rows is None
    cases = [c for c in CASES if everything or c.id in (args.cases or "").split(",")]
    real = [r for r in ROW_IDS if everything or r in (args.rows or "").split(",")]
    unknown = set((args.cases or "").split(",")) - {c.id for c in CASES} - {""}
    if unknown or (args.rows and set(args.rows.split(",")) - set(ROW_IDS)):
        print(f"error: unknown ids {sorted(unknown) or args.rows}; see --list", file=sys.stderr)
        return 2
    quiet_vllm("matrix")
    engine_env()
    start, start_cpu = time.perf_counter(), cpu_time()
    print(f"MRV2 input preparation on this machine: {expected_input_preparation()}", flush=True)
    rows: list[MatrixRow] = []
    with environ(VLLM_ENABLE_V1_MULTIPROCESSING="1" if args.processes else "0"):
        for i, c in enumerate(cases, 1):
            print(f"[{i}/{len(cases)}] {c.id} ({c.architecture}); load average {os.getloadavg()[0]:.1f}", flush=True)
            rows += run_case(c)
            print("  -> " + ", ".join(f"{r.task}/{r.runner}: {'pass' if r.passed else 'FAIL'}"
                                      for r in rows if r.id.startswith(c.id + "/")), flush=True)
        for row_id in real:
            print(f"[real] {row_id}; load average {os.getloadavg()[0]:.1f}", flush=True)
            rows.append(run_row(row_id))
            print(f"  {rows[-1].seconds:.1f} s wall, {rows[-1].cpu_seconds:.1f} s CPU", flush=True)
    selections = report.selector_rows() if everything or args.update else []
    wall = time.perf_counter() - start
    print(f"matrix: {wall:.0f} s wall, {cpu_time() - start_cpu:.0f} s CPU, load average now "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    report.write(rows, selections, wall, update=args.update)
    failed = [r for r in rows + selections if not r.passed]
    print(f"{len(rows) + len(selections) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
