# Two commands for a fresh machine: `make demo` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KEEL := $(VENV)/bin/keel

.PHONY: install test-install test-tools pgvector bwrap qemu chromium demo dev test lint bench chaos record-histories clean
PIP := $(PY) -m pip install --quiet --disable-pip-version-check

install: $(VENV)/.installed  ## what Keel runs with (make demo, make dev): the package and its `dev` extra (pyproject.toml)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PIP) --upgrade pip
	$(PIP) -e '.[dev]'
	touch $@

test-install: $(VENV)/.installed-test  ## and what the tests and benches use: a CPU torch for the embeddings, LiteLLM's proxy, PostgreSQL with pgvector...

$(VENV)/.installed-test: pyproject.toml tests/pgvector_build.py | $(PY)
	$(PIP) --upgrade pip
	$(PIP) torch==2.13.0  # the CPU build, before sentence-transformers
	$(PIP) -e '.[test]'
	$(MAKE) --no-print-directory pgvector
	touch $@ $(VENV)/.installed

test-tools: $(VENV)/tools/.installed  ## the tests' Phoenix and schemathesis, each in a virtualenv of its own (tests/tool_envs.py)

$(VENV)/tools/.installed: tests/tool_envs.py keel/client/phoenix_server.py keel/client/tool_venv.py | $(PY)
	$(PY) -m tests.tool_envs && touch $@ || echo "the tests' tools were not installed: the tests that use them install them"

pgvector:  ## pgvector for the tests' PostgreSQL, built for any x86-64 (the wheel's needs AVX-512): tests/pgvector_build.py
	$(PY) -m tests.pgvector_build

demo: install  ## the demo end to end: local Temporal, worker, one approved and one declined run; leaves nothing running
	$(KEEL) demo

dev: install  ## the whole stack in the foreground (Temporal dev server + UI, worker, HTTP API on :4111); Ctrl-C stops all
	$(KEEL) dev

test:  ## every test; the tests start their own Temporal dev server and PostgreSQL
	@$(MAKE) --no-print-directory -j2 test-install test-tools  # the tests' tools install beside the main install
	@$(MAKE) --no-print-directory -j1 bwrap qemu chromium  # one after another: apt takes one at a time
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest -n 2 --dist loadfile  # two test processes, a file's tests in one (its fixtures shared)

bwrap:  ## bubblewrap for isolated workspace commands: installed with apt where it can be; its tests skip without it
	@command -v bwrap >/dev/null || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && \
		    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; }; } || \
		echo "bubblewrap not installed: the bwrap tests will say 'skipped: bwrap missing'"

qemu:  ## qemu-user, to run pgvector on an emulated CPU without AVX-512: installed with apt where it can be; else that test skips
	@command -v qemu-x86_64 >/dev/null || [ "$$(uname -m)" != x86_64 ] || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && \
		    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user >/dev/null 2>&1; }; }; } || \
		echo "qemu-user not installed: the emulated-CPU pgvector test will say 'skipped: qemu-x86_64 missing'"

chromium:  ## Debian's Chromium, to screenshot a trace in Phoenix: installed with apt where it can be; else that test skips
	@command -v chromium >/dev/null || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && \
		    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; }; }; } || \
		echo "chromium not installed: the Phoenix screenshot test will say 'skipped: chromium missing'"

bench: test-install  ## per-step cost of Keel against bare temporalio, side by side (see bench/README.md)
	$(PY) -m bench.agent_steps

MINUTES ?= 10
SEED ?= 1
IN_FLIGHT ?= 20
chaos: test-install  ## kill every process, fill the disk, fail the model at random under a mix of runs; check nothing is lost (bench/chaos)
	$(PY) -m bench.chaos --minutes $(MINUTES) --seed $(SEED) --in-flight $(IN_FLIGHT) --json .keel/chaos-$(SEED).json

record-histories: test-install  ## re-record tests/histories/*.json from the current workflow code
	$(PY) -m tests.record_histories

clean:
	rm -rf $(VENV) .keel .pytest_cache .mypy_cache .ruff_cache
