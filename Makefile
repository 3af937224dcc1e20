# Baton: `make demo` runs the default pipeline end to end and serves one prediction;
# `make test` runs lint, types, the import-layer contract and the whole test suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: demo test lint bench venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall only when the project's declared dependencies change.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m pipeline.demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy pipeline graphs strategies serving k8s
	$(BIN)/lint-imports

test: lint
	bash .ci/pytest.sh $(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/run_all.py

clean:
	rm -rf runs models .pytest_cache .mypy_cache .ruff_cache
