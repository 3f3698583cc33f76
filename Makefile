# The two README commands: `make demo` and `make test`. Both set up .venv (idempotent, quiet when done).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# This machine kind's pip config lists local index folders that may be absent; pip warns once per package.
QUIET_PIP := { grep -v "is ignored: it is neither a file nor a directory" || true; }
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
# Shared 2-core boxes: OpenMP busy-waiting makes torch 10x slower; JAX gets 8 fake devices for meshes.
export OMP_WAIT_POLICY ?= PASSIVE
export OMP_NUM_THREADS ?= 2
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8
export TOKENIZERS_PARALLELISM ?= false
export HF_HUB_OFFLINE ?= 1
PYTEST_ARGS ?=
# Both cores (pytest-xdist). Whole files to a worker: a module's fixtures (a trained run, an export) are built once;
# session fixtures are built once for both workers (tests/helpers/shared.py).
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile

.PHONY: setup iverilog chromium demo test test-slow lint lock clean-venv

setup: $(STAMP) iverilog

$(STAMP): requirements.lock pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python 3.11)"; exit 1; }
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing the pinned environment into $(VENV) (first time: ~3 min, ~2.5 GB)..."
	@$(VENV)/bin/pip install -q -r requirements.lock 2>&1 | $(QUIET_PIP)
	@$(VENV)/bin/pip install -q --no-deps -e . 2>&1 | $(QUIET_PIP)
	@$(VENV)/bin/pip check >/dev/null || $(VENV)/bin/pip check
	@touch $(STAMP)

iverilog:
	@bash scripts/install_iverilog.sh

# The report test renders report.html in Debian's chromium; without it (no apt) that one test skips, saying why.
chromium:
	@bash scripts/install_chromium.sh || echo "chromium could not be installed: the report's browser test will skip"

demo: setup
	@$(VENV)/bin/crosstune demo

test: setup chromium
	@$(VENV)/bin/python -m pytest -q $(XDIST) $(PYTEST_ARGS)

# A test marked serve as well (the drafter's vLLM measurement) runs in test-serve, not twice in CI.
test-slow: setup
	@$(VENV)/bin/python -m pytest -q -m "slow and not serve" $(PYTEST_ARGS)

# --- the real-dimension rehearsal: Gemma 4 31B's true dimensions with 2 layers in the hub's layout,
# prepare -> train torch -> train jax -> export both -> parity (~15 min, ~15 GB of RAM, ~10 GB of disk). The jax leg's
# vocabulary and settings are arguments: make rehearsal REHEARSAL_ARGS="--jax-vocab 262144 --jax-set KEY=VALUE"
.PHONY: rehearsal test-rehearsal
REHEARSAL_DIR ?= /tmp/crosstune-rehearsal
REHEARSAL_ARGS ?=
rehearsal: setup
	@$(VENV)/bin/python bench/rehearsal.py --work $(REHEARSAL_DIR) --json $(REHEARSAL_DIR).json $(REHEARSAL_ARGS)

test-rehearsal: setup
	@REHEARSAL_ARGS="$(REHEARSAL_ARGS)" $(VENV)/bin/python -m pytest -q -s -m rehearsal $(PYTEST_ARGS)

lint: setup
	@$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# Regenerate requirements.lock from requirements.in in a scratch venv.
lock:
	rm -rf /tmp/crosstune-lock && $(PYTHON) -m venv /tmp/crosstune-lock
	/tmp/crosstune-lock/bin/pip install -q -r requirements.in
	{ head -2 requirements.lock; echo "torch==2.13.0"; /tmp/crosstune-lock/bin/pip freeze | grep -vE '^(torch|crosstune)=='; } > requirements.lock.new
	mv requirements.lock.new requirements.lock
	$(VENV)/bin/python -c "from pathlib import Path; from crosstune.launch.job_spec import JAX_LOCK, jax_lock_text; \
	  Path(JAX_LOCK).write_text(jax_lock_text(Path('requirements.lock').read_text()))"

clean-venv:
	rm -rf $(VENV)

# --- on a TPU chip: `make test-tpu` runs the tests marked tpu in one process (one program at a time can hold a
# chip; skipped without one, never in CI). Their tiny model and corpus are built where torch is (make tpu-fixtures)
# and carried to the TPU host, which needs no torch.
.PHONY: test-tpu tpu-fixtures
# where the fixtures are: TPU_FIXTURES=DIR, or CROSSTUNE_TPU_FIXTURES (the tests' own variable) in the environment
TPU_FIXTURES ?= $(or $(CROSSTUNE_TPU_FIXTURES),/tmp/crosstune-tpu-fixtures)
tpu-fixtures: setup
	@test -f $(TPU_FIXTURES)/model/config.json || $(VENV)/bin/crosstune model tiny --family gemma4 --out $(TPU_FIXTURES)/model
	@test -f $(TPU_FIXTURES)/corpus/train.jsonl || $(VENV)/bin/crosstune synth --out $(TPU_FIXTURES)/corpus --n 64 --seed 0

test-tpu:
	@CROSSTUNE_TPU_FIXTURES=$(TPU_FIXTURES) $(VENV)/bin/python -m pytest -q -p no:xdist -p no:cacheprovider -m tpu tests/train/jax/test_tpu.py $(PYTEST_ARGS)

# --- the fuzzer: every command with hostile inputs, each in a process under a memory and time limit, over
# a tree with canaries outside it (tests/fuzz; docs/FAILURE_MODES.md, "The fuzzer"). fuzz-ci: seed 0, 8 cases per
# command (~70 s on 2 cores, docs/BENCHMARKS.md); fuzz: FUZZ_SEED (default: the time) and FUZZ_CASES, longer. A
# failing case prints its reproduction and is kept under FUZZ_KEEP (default /tmp/crosstune-fuzz/seed-SEED).
.PHONY: fuzz fuzz-ci
FUZZ_SEED ?= $(shell date +%s)
FUZZ_CASES ?= 40
FUZZ_KEEP ?= /tmp/crosstune-fuzz/seed-$(FUZZ_SEED)
export FUZZ_SEED FUZZ_CASES
FUZZ_RUN = rm -f $(FUZZ_KEEP)/outcomes.txt && FUZZ_KEEP=$(FUZZ_KEEP) $(VENV)/bin/python -m pytest -q -p no:cacheprovider \
	-m fuzz -n $(TEST_WORKERS) --dist load tests/fuzz $(PYTEST_ARGS)
fuzz-ci: setup
	@$(MAKE) --no-print-directory fuzz-run FUZZ_SEED=0 FUZZ_CASES=8

fuzz: setup
	@echo "fuzz: FUZZ_SEED=$(FUZZ_SEED) FUZZ_CASES=$(FUZZ_CASES) per command"
	@$(MAKE) --no-print-directory fuzz-run FUZZ_SEED=$(FUZZ_SEED) FUZZ_CASES=$(FUZZ_CASES)

# one line per case (exit, wall and CPU seconds, the last line of stderr) in $(FUZZ_KEEP)/outcomes.txt
.PHONY: fuzz-run
fuzz-run:
	@$(FUZZ_RUN)

# --- report (crosstune cost / report): the report test renders report.html in Debian's chromium -------------------
.PHONY: test-report
test-report: setup chromium
	@$(VENV)/bin/python -m pytest -q tests/cost tests/report $(PYTEST_ARGS)

# --- serving (vLLM) ---------------------------------------------------------------------------------------------
# vLLM's CPU build in its own venv (its pins conflict with the training stack's); ~3 min and 3.4 GB the first time.
.PHONY: serve-env test-serve
serve-env:
	@PYTHON=$(PYTHON) bash scripts/install_serve_env.sh

# The integration tests against real vLLM (the default `make test` skips them: they need .venv-serve).
test-serve: setup serve-env
	@$(VENV)/bin/python -m pytest -q -m serve $(PYTEST_ARGS)

# --- demo base: the demo's small Gemma 4 ships in the package; this rebuilds it (~17 min on 2 cores) into
# the cache, to the same bytes (tests/pretrain/test_pretrain.py checks that, slow)
.PHONY: pretrain test-rebuild
pretrain: setup
	@$(VENV)/bin/crosstune pretrain --rebuild

# The rebuild compared byte for byte with the shipped base (~17 min): by hand, result in docs/BENCHMARKS.md.
test-rebuild: setup
	@$(VENV)/bin/python -m pytest -q -m rebuild $(PYTEST_ARGS)

# --- ahead-of-time TPU compile: `crosstune plan RECIPE --compile` compiles the real jax step for a TPU
# topology on this machine. It needs libtpu (213 MB, requirements-tpu-compile.txt: the version jax's [tpu] extra
# pins), installed into a folder of its own: in .venv every `import jax` would look for a TPU.
.PHONY: tpu-compile-env test-tpu-compile
TPU_COMPILE_ENV ?= .venv-tpu-compile
tpu-compile-env: setup
	@test -f $(TPU_COMPILE_ENV)/libtpu/libtpu.so || { echo "Installing libtpu (213 MB) into $(TPU_COMPILE_ENV)..."; \
	  $(VENV)/bin/pip install -q --target $(TPU_COMPILE_ENV) -r requirements-tpu-compile.txt 2>&1 | $(QUIET_PIP); }

# Full-depth compiles of the shipped TPU recipes, planner vs XLA (~40 min and ~17 GB of RAM on 2 cores, one at a time)
test-tpu-compile: setup tpu-compile-env
	@CROSSTUNE_TPU_COMPILE_ENV=$(TPU_COMPILE_ENV) $(VENV)/bin/python -m pytest -q -m tpu_compile $(PYTEST_ARGS)

# --- launch (crosstune launch): SkyPilot's CLI and task loader in their own venv (skypilot pins click<8.2;
# the lock has 8.5). The launch tests validate the generated specs with it and skip, saying this command, without it.
.PHONY: launch-env slurm-env test-launch
launch-env:
	@PYTHON=$(PYTHON) bash scripts/install_launch_env.sh

# Debian's Slurm and MUNGE: test-launch starts a single-node cluster from them (scripts/slurm_local.sh).
slurm-env:
	@bash scripts/install_slurm.sh

# The specs through SkyPilot's and Kubernetes' own loaders, a real Slurm job of the tiny study and the requeue drill
# (marker slurm), and, at the same time (network-bound, ~3 min), the accelerator install sets resolved by pip against
# PyPI (marker resolve; its output follows the rest).
RESOLVE_LOG := .pytest-resolve.log
test-launch: setup launch-env slurm-env
	@$(VENV)/bin/python -m pytest -q -p no:cacheprovider -m resolve tests/launch $(PYTEST_ARGS) >$(RESOLVE_LOG) 2>&1 & \
	  resolve=$$!; trap 'kill $$resolve 2>/dev/null || true' INT TERM; status=0; \
	  $(VENV)/bin/python -m pytest -q -m "not resolve and not slow" tests/launch $(PYTEST_ARGS) || status=$$?; \
	  wait $$resolve || status=1; echo "--- the install sets (pytest -m resolve tests/launch):"; cat $(RESOLVE_LOG); \
	  rm -f $(RESOLVE_LOG); exit $$status
