# The README's commands. Every target depends on the virtual environment at .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: test unit integration lint demo kafka-start kafka-stop clean

.venv: pyproject.toml
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "driftlog needs Python 3.11+ (set PY=python3.11)")'
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(VENV)

test: $(VENV)
	$(BIN)/pytest -q tests

unit: $(VENV)
	$(BIN)/pytest -q tests/unit

integration: $(VENV)
	$(BIN)/pytest -q -m integration tests/integration

lint: $(VENV)
	$(BIN)/ruff check .
	$(BIN)/mypy

demo: $(VENV)
	$(BIN)/driftlog demo

kafka-start: $(VENV)
	$(BIN)/driftlog kafka start

kafka-stop: $(VENV)
	$(BIN)/driftlog kafka stop

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache driftlog-demo.duckdb
