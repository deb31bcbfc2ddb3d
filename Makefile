# Everything runs from .venv at the repository root; every target builds it when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# What `make demo` alone installs into .venv (the demo extra); $(STAMP) implies it.
DEMO_STAMP := $(VENV)/.demo-stamp
# checkov gets its own environment: it pins an older boto3 than the project needs.
CHECKOV_VENV  := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-stamp
# Wheels of skyinfra's dependencies (the pip-install test installs from here, never an index),
# and of jax and keras at the versions in .venv (the ssh target's stand-in hosts install them).
WHEELHOUSE       := .wheelhouse
WHEELHOUSE_STAMP := $(WHEELHOUSE)/.stamp
DIST             := dist

.PHONY: venv venvs system-deps wheelhouse wheels test test-cold test-durations bench-suite-then bench-suite-cpu bench-suite-processes test-random test-fast test-gpu record-plans docs-reference lint demo bench clean

venv: $(STAMP)

# torch is pinned, and the pin alone does not choose the CPU build: pip takes the best
# 2.13.0 it finds. The CPU build is the local version 2.13.0+cpu (==2.13.0 matches it, and it
# sorts above plain 2.13.0): this project's machine image has one in pip's find-links,
# and PyTorch's CPU index (TORCH_INDEX, below) serves it with torch's dependencies. Against
# PyPI alone, 2.13.0 on Linux x86_64 is the CUDA build, which pulls several GB of nvidia-*
# packages (macOS wheels are CPU-only anyway). On a fresh Linux machine:
#   make venv TORCH_INDEX=https://download.pytorch.org/whl/cpu
# Not the default: where that index is out of reach (a registry-only network such as this
# project's machines) pip retries it for every one of torch's dependencies, over a minute.
TORCH_VERSION ?= 2.13.0
TORCH_INDEX   ?=

# Everything: the dev extra (test tools, and the demo extra inside it) and torch.
$(STAMP): pyproject.toml runtime/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q -e runtime -e '.[dev]'
	touch $@ $(DEMO_STAMP)

# `make demo` on a fresh machine: only skyinfra and the demo extra (jax, keras),
# into the same .venv, with pip's progress shown; make venv/test add the rest.
$(DEMO_STAMP): pyproject.toml runtime/pyproject.toml
	@echo "[make demo] step 1/3: a virtual environment in $(VENV)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "[make demo] step 2/3: pip itself"
	$(BIN)/python -m pip install --upgrade pip
	@echo "[make demo] step 3/3: skyinfra, skyinfra-runtime and the demo extra (jax, keras)"
	$(BIN)/python -m pip install -e runtime -e '.[demo]'
	touch $@

system-deps:
	tests/system-deps.sh

# Both environments and the wheelhouse, two at a time (.ci/run: make -j2 venvs): on a fresh
# machine each pip spends most of its time waiting on downloads and the disk, which the other
# fills with its own unpacking; the wheelhouse (it needs .venv) overlaps checkov's install.
venvs: $(STAMP) $(CHECKOV_STAMP) $(WHEELHOUSE_STAMP)

$(CHECKOV_STAMP):
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q checkov==3.3.30
	touch $@

wheelhouse: $(WHEELHOUSE_STAMP)

# The dependencies named in pyproject.toml (skyinfra-runtime is built from runtime/ instead),
# and the frameworks at the operator's versions (torch's CPU build, as `make venv` gets it):
# the ssh target's stand-in hosts install their python_packages from here.
$(WHEELHOUSE_STAMP): pyproject.toml $(STAMP) Makefile
	mkdir -p $(WHEELHOUSE)
	$(BIN)/python -c 'import tomllib; deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print("\n".join(d for d in deps if not d.startswith("skyinfra-runtime")))' > $(WHEELHOUSE)/requirements.txt
	$(BIN)/python -c 'from importlib.metadata import version; print("\n".join(f"{p}=={version(p)}" for p in ("jax", "jaxlib", "keras", "torch")))' >> $(WHEELHOUSE)/requirements.txt
	$(BIN)/python -m pip wheel -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) --wheel-dir $(WHEELHOUSE) -r $(WHEELHOUSE)/requirements.txt
	touch $@

# Both distributions as wheels in dist/ (install: pip install dist/*.whl).
wheels: $(STAMP)
	rm -rf $(DIST) build runtime/build
	$(BIN)/python -m build --wheel --no-isolation --outdir $(DIST) .
	$(BIN)/python -m build --wheel --no-isolation --outdir $(DIST) runtime

# The suite runs on TEST_WORKERS pytest-xdist workers, each in a network namespace of its own
# that holds only loopback (tests/loopback-only.sh as the worker's interpreter): local clusters
# on 127.0.0.2:29500 in two workers never meet, and no packet leaves the machine. --dist
# loadfile keeps a test file on one worker, so a module's fixtures (a live cluster) are made
# once; files go out longest first, by the seconds in tests/durations.json
# (tests/support/schedule.py; `make test-durations` records them anew). (loadgroup would share out the AWS e2e files test by test, but pytest-xdist 3.8 marks
# groups by rewriting item._nodeid, which pytest 9.2 no longer reads: it groups nothing.)
# 5 workers on 2 cores: a worker waiting on an AWS provider poll or a node's timeout leaves
# its core to another (docs/development/testing.md). With 4, the cores idled 10-35% of the time in
# half-minute stretches while three AWS files waited on the provider at once; with 5 they are
# busy nearly throughout, at the same CPU in all. Every run ends with the 25 slowest tests and
# the seconds per folder (tests/support/timings.py). Random order is make test-random's.
TEST_WORKERS ?= 5
WORKERS = --dist loadfile \
	--tx '$(TEST_WORKERS)*popen//python=$(CURDIR)/tests/loopback-only.sh $(CURDIR)/$(BIN)/python'
# Terraform and its providers are Go programs that live for one command: about a fifth of their
# CPU went to garbage collection (measured on the AWS plan-review test: 126 -> 99 CPU seconds).
# The suite turns the collector off under a 1 GiB soft limit per process (GOMEMLIMIT: Go still
# collects before that); a command's processes then peak near 1.3 GB instead of 0.9 GB.
TF_GC = GOGC=off GOMEMLIMIT=1GiB
# Python's bytecode cache on for the suite: with PYTHONDONTWRITEBYTECODE=1 in the environment
# (this machine image sets it) every CLI a test starts compiled skyinfra's modules anew, and
# every worker re-did pytest's assertion rewriting of all test modules (collection 7.3 s -> 4.4 s
# of CPU per worker with the cache).
SUITE = env -u PYTHONDONTWRITEBYTECODE $(TF_GC) SKYINFRA_CHECKOV=$(CURDIR)/$(CHECKOV_VENV)/bin/checkov tests/loopback-only.sh \
	$(BIN)/python -m pytest --durations=25 $(WORKERS)
# TESTS="paths": only those, with the same settings (the slow-machine check: docs/development/testing.md).
TESTS ?=
test: $(STAMP) $(CHECKOV_STAMP) $(WHEELHOUSE_STAMP) system-deps
	$(SUITE) -p no:randomly $(TESTS)

# The suite as a fresh machine runs it: .ci/run in a fresh clone of HEAD with HOME an empty
# folder (no pip, uv or Terraform caches, nothing built or compiled); prints its seconds.
test-cold:
	tests/cold-run.sh

# The same suite, and each test file's seconds written to tests/durations.json (commit it when
# files were added or their times moved: the order the workers get files in).
test-durations: $(STAMP) $(CHECKOV_STAMP) $(WHEELHOUSE_STAMP) system-deps
	SKYINFRA_RECORD_DURATIONS=1 $(SUITE) -p no:randomly

# Issue 21's like-for-like measure, not a test: the suite as it was when the issue was filed
# (15 min 17 s then on a 2-core machine), its test functions listed in
# tests/bench/suite_at_issue_21.txt by today's names, run with make test's settings; the tests
# added since are deselected (tests/support/suite_then.py).
bench-suite-then: $(STAMP) $(CHECKOV_STAMP) $(WHEELHOUSE_STAMP) system-deps
	SKYINFRA_SUITE_THEN=$(CURDIR)/tests/bench/suite_at_issue_21.txt $(SUITE) -p no:randomly

# Where the suite's CPU goes: `make test` (TESTS= works) with a sampler reading each worker's
# network namespace, then the CPU seconds of each test file (tests/bench/cpu_by_file.py); the
# report also goes to tests/bench/results/cpu-by-file.json.
CPU_PROFILE ?= $(CURDIR)/.cpu-profile
bench-suite-cpu: $(STAMP) $(CHECKOV_STAMP) $(WHEELHOUSE_STAMP) system-deps
	rm -rf $(CPU_PROFILE) && mkdir -p $(CPU_PROFILE)
	$(BIN)/python tests/bench/cpu_by_file.py sample $(CPU_PROFILE) & sampler=$$!; \
	SKYINFRA_CPU_PROFILE=$(CPU_PROFILE) $(SUITE) -p no:randomly $(TESTS); rc=$$?; \
	kill $$sampler; wait $$sampler; \
	$(BIN)/python tests/bench/cpu_by_file.py report $(CPU_PROFILE) \
		--json tests/bench/results/cpu-by-file.json; exit $$rc

# The same by program (standby and cold workers, Terraform, the provider, CLI calls, the
# runtime's processes): the kernel's process accounting (root only) and a command-line sampler
# (tests/bench/cpu_by_process.py); the report also goes to tests/bench/results/cpu-by-process.json.
bench-suite-processes: $(STAMP) $(CHECKOV_STAMP) $(WHEELHOUSE_STAMP) system-deps
	rm -rf $(CPU_PROFILE) && mkdir -p $(CPU_PROFILE)
	$(BIN)/python tests/bench/cpu_by_process.py sample $(CPU_PROFILE)/cmdlines & sampler=$$!; \
	$(BIN)/python tests/bench/cpu_by_process.py on $(CPU_PROFILE)/acct || { kill $$sampler; exit 1; }; \
	$(SUITE) -p no:randomly $(TESTS); rc=$$?; \
	$(BIN)/python tests/bench/cpu_by_process.py off; kill $$sampler; wait $$sampler 2>/dev/null; \
	$(BIN)/python tests/bench/cpu_by_process.py report $(CPU_PROFILE)/acct $(CPU_PROFILE)/cmdlines \
		--json tests/bench/results/cpu-by-process.json; exit $$rc

# The same suite in a random order (pytest-randomly prints its seed; `make test-random
# RANDOM_SEED=N` repeats that order): proves no test depends on another having run first.
RANDOM_SEED ?=
test-random: $(STAMP) $(CHECKOV_STAMP) $(WHEELHOUSE_STAMP) system-deps
	$(SUITE) $(if $(RANDOM_SEED),--randomly-seed=$(RANDOM_SEED))

# The inner loop: tests/unit only, the pure functions and in-process checks; no Terraform, no
# servers, no clusters, no framework processes, no venv builds (slow). Two workers: about 50 s
# of work, most of it CLI subprocesses for the bad-spec cases, on the two cores.
test-fast: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest tests/unit -m "not slow" -q -p no:randomly -n 2

# The GPU paths on a machine with an NVIDIA GPU and its own torch and jax (CUDA builds): the
# runtime from the source tree, no venv; the suite's conftest needs the operator's packages,
# which such a machine need not have. In make test these skip (no GPU), saying why.
test-gpu:
	PYTHONPATH=$(CURDIR)/runtime/src:$(CURDIR) $(PYTHON) -m pytest --noconftest -o addopts= \
		-p no:cacheprovider -v -rA tests/gpu

# A tool, not a test: re-plan the AWS review cases against moto with real Terraform and rewrite
# their golden plan.md and the plan JSON tests/unit/review replays (`make test` checks them).
record-plans: $(STAMP)
	$(TF_GC) SKYINFRA_UPDATE_GOLDEN=1 tests/loopback-only.sh $(BIN)/python -m pytest -q -p no:randomly \
		tests/e2e/aws/test_plan_review.py

# The manual's generated reference pages: docs/reference/cli.md (every command and option, from
# the click commands) and docs/reference/exit-codes.md (skyinfra/exitcodes.py). Commit what it
# writes; tests/unit/test_docs_reference.py fails while they differ from the code.
docs-reference: $(STAMP)
	$(BIN)/python -m skyinfra.cli.reference

lint: $(STAMP)
	$(BIN)/ruff check skyinfra runtime tests examples
	$(BIN)/ruff format --check skyinfra runtime tests examples
	# The runtime claims Python 3.10 (the nodes' interpreter): type-checked against 3.10's
	# standard library too (no tomllib, no datetime.UTC there). Both mypy runs at once, each
	# on a core (each keeps its cache under its Python version): on a fresh clone they are
	# most of lint's time.
	$(BIN)/mypy --python-version 3.10 runtime/src/skyinfra_runtime & runtime=$$!; \
		$(BIN)/mypy; rc=$$?; wait $$runtime || rc=1; exit $$rc
	$(BIN)/lint-imports
	# The manual (mkdocs.yml): a broken link or anchor, or a page off the nav, fails here. Built
	# into a temporary folder (nothing written in the tree; about a second). Not --quiet: mkdocs
	# 1.6 then counts no warning, and --strict passes whatever they say.
	site=$$(mktemp -d) && $(BIN)/mkdocs build --strict --site-dir $$site; rc=$$?; rm -rf $$site; exit $$rc

demo: $(DEMO_STAMP)
	$(BIN)/python -m skyinfra.demo

# Not part of `test`: rewrites BENCHMARKS.md (REPS=N runs per figure, ONLY=1,4 some figures;
# ONLY=14: checkpoint overhead alone, ONLY=15 the Spot notice alone, ONLY=19 warm workers
# against cold, its section replaced).
REPS ?= 3
ONLY ?= 1,2,3,4,5,6,7,8,9,10,11,14,15,19
bench: $(STAMP)
	$(BIN)/python tests/bench/run.py --reps $(REPS) --only $(ONLY)

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) $(WHEELHOUSE) $(DIST) build runtime/build .site .skyinfra .pytest_cache .mypy_cache .ruff_cache
