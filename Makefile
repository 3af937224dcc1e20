# Baton: `make demo` runs the default pipeline end to end and serves one prediction;
# `make test` runs lint, types, the import-layer contract and the whole test suite (lint
# beside the suite);
# `make test-fast` only the suite, without the slow and multi_worker tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --no-compile --disable-pip-version-check
# uv installs the project: on a clean machine 23 s (uv itself 3 s) against 116 s for pip, the
# same packages (pip freeze equal), the same PyPI. It compiles no bytecode (like --no-compile).
UV     := $(BIN)/uv pip install --quiet --python $(BIN)/python
export TF_CPP_MIN_LOG_LEVEL ?= 2
# Bytecode is compiled lazily (uv compiles none at install) and must then be written: with
# PYTHONDONTWRITEBYTECODE set (as on this machine) every process of the suite compiled
# TensorFlow's and Keras' sources again on import (fresh-venv pytest: 11 min 06 s, 7 min 37 s once written).
export PYTHONDONTWRITEBYTECODE =

# The suite runs in TEST_WORKERS pytest-xdist processes, a file per worker at a time so module
# fixtures (trained models, data stages) are built once (grouping the cluster files on one
# worker measured slower: 8:53 against 7:05); TEST_WORKERS=0 runs one process. 3 on CI's 2
# cores: the federated and cluster tests spend much of their time waiting (Flower's dead-node
# detection, group restarts), and a third worker fills those waits (fresh clone, 2 cores:
# pytest 12:29 with 3 workers against 16:00 with 2; since the federated stage stopped running
# `flwr ls` every 2 s, 12:03 and 13:33 with 3 against 13:14 with 4). --no-loadscope-reorder keeps the order of
# tests/conftest.py (files that start clusters first): pytest-xdist 3.8 otherwise hands out the
# files with the most tests first, which left the few-test, minutes-long federated files for
# the last minutes of the run, alone on one worker.
TEST_WORKERS ?= 3
PYTEST_ARGS := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

.PHONY: demo test test-fast lint bench venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(BIN)/uv: | $(BIN)/python
	$(PIP) 'uv>=0.5'

# Reinstall only when the declared dependencies change. The demo needs the runtime only;
# test and lint add the dev tools. Bytecode is compiled lazily on import instead of for every
# file of TensorFlow at install time (about a minute saved on 2 cores).
$(VENV)/.runtime: pyproject.toml | $(BIN)/uv
	$(UV) -e .
	touch $@

# One install for the runtime and the dev tools: on a clean checkout a second run resolved
# everything again after the first.
$(VENV)/.dev: pyproject.toml | $(BIN)/uv
	$(UV) -e '.[dev,federated,text]'
	touch $(VENV)/.runtime $@

venv: $(VENV)/.dev

demo: $(VENV)/.runtime
	$(BIN)/python -m baton.pipeline.demo

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/mypy baton
	$(BIN)/lint-imports

# Lint runs beside the suite, not before it (mypy alone takes about 30 s of a cold CPU), and
# its output comes after the suite's; either failing fails the target.
test: $(VENV)/.dev
	@$(MAKE) --no-print-directory lint > $(VENV)/lint.log 2>&1 & lint=$$!; \
	bash .ci/pytest.sh $(BIN)/pytest $(PYTEST_ARGS); rc=$$?; \
	wait $$lint; lint_rc=$$?; echo "== make lint (exit $$lint_rc)"; cat $(VENV)/lint.log; \
	[ $$lint_rc -eq 0 ] || exit $$lint_rc; exit $$rc

# The edit-test loop: no lint, no tests marked slow or multi_worker (none collected fails).
test-fast: $(VENV)/.dev
	bash .ci/pytest.sh $(BIN)/pytest $(PYTEST_ARGS) -m "not slow and not multi_worker"

# The serving benchmark drives load with wrk (Debian's package); the data benchmark's peer,
# tensorflow-transform, pins its own versions and so lives in its own venv.
bench: $(VENV)/.dev
	$(UV) -e '.[bench]'
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	test -x .venv-tft/bin/python || ($(PYTHON) -m venv .venv-tft && \
	  .venv-tft/bin/python -m pip install --quiet 'tensorflow-transform==1.21.*')
	$(BIN)/python bench/run_all.py

clean:
	rm -rf runs models .pytest_cache .mypy_cache .ruff_cache
