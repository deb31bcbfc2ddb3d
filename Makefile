# Everything runs from .venv at the repository root; every target builds it when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# checkov gets its own environment: it pins an older boto3 than the project needs.
CHECKOV_VENV  := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-stamp
# Wheels of skyinfra's dependencies: the pip-install test installs from here, never an index.
WHEELHOUSE       := .wheelhouse
WHEELHOUSE_STAMP := $(WHEELHOUSE)/.stamp
DIST             := dist

.PHONY: venv system-deps wheelhouse wheels test test-fast record-plans lint demo bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml runtime/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch is pinned: 2.13.0 installs from a local CPU wheel; unpinned pulls GB of CUDA.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e runtime -e '.[dev]'
	touch $@

system-deps:
	tests/system-deps.sh

$(CHECKOV_STAMP):
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q checkov==3.3.30
	touch $@

wheelhouse: $(WHEELHOUSE_STAMP)

# The dependencies named in pyproject.toml (skyinfra-runtime is built from runtime/ instead).
$(WHEELHOUSE_STAMP): pyproject.toml $(STAMP)
	mkdir -p $(WHEELHOUSE)
	$(BIN)/python -c 'import tomllib; deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print("\n".join(d for d in deps if not d.startswith("skyinfra-runtime")))' > $(WHEELHOUSE)/requirements.txt
	$(BIN)/python -m pip wheel -q --wheel-dir $(WHEELHOUSE) -r $(WHEELHOUSE)/requirements.txt
	touch $@

# Both distributions as wheels in dist/ (install: pip install dist/*.whl).
wheels: $(STAMP)
	rm -rf $(DIST) build runtime/build
	$(BIN)/python -m build --wheel --no-isolation --outdir $(DIST) .
	$(BIN)/python -m build --wheel --no-isolation --outdir $(DIST) runtime

# The suite runs in a network namespace of its own holding only loopback (tests/loopback-only.sh).
# Every run ends with the 25 slowest tests and the seconds per folder (tests/support/timings.py).
test: $(STAMP) $(CHECKOV_STAMP) $(WHEELHOUSE_STAMP) system-deps
	SKYINFRA_CHECKOV=$(CURDIR)/$(CHECKOV_VENV)/bin/checkov tests/loopback-only.sh \
		$(BIN)/python -m pytest --durations=25

# The inner loop (about 30 s on 2 cores): tests/unit only, the pure functions and in-process
# checks; no Terraform, no servers, no clusters, no framework processes, no venv builds (slow).
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/unit -m "not slow" -q

# A tool, not a test: re-plan the AWS review cases against moto with real Terraform and rewrite
# their golden plan.md and the plan JSON tests/unit/review replays (`make test` checks them).
record-plans: $(STAMP)
	SKYINFRA_UPDATE_GOLDEN=1 tests/loopback-only.sh $(BIN)/python -m pytest -q \
		tests/e2e/aws/test_plan_review.py

lint: $(STAMP)
	$(BIN)/ruff check skyinfra runtime tests examples
	$(BIN)/ruff format --check skyinfra runtime tests examples
	$(BIN)/mypy
	$(BIN)/lint-imports

demo: $(STAMP)
	$(BIN)/python -m skyinfra.demo

# Not part of `test`: rewrites BENCHMARKS.md (REPS=N runs per figure, ONLY=1,4 some figures).
REPS ?= 3
ONLY ?= 1,2,3,4,5,6
bench: $(STAMP)
	$(BIN)/python tests/bench/run.py --reps $(REPS) --only $(ONLY)

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) $(WHEELHOUSE) $(DIST) build runtime/build .skyinfra .pytest_cache .mypy_cache .ruff_cache
