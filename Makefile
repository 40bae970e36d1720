# The README's commands. Every target depends on the virtual environment at .venv, with the native core
# (native/, Rust) built into it when cargo is installed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
NATIVE := $(VENV)/.native-built

.PHONY: test unit integration lint demo kafka-start kafka-stop clean bench bench-smoke

.venv: pyproject.toml
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "driftlog needs Python 3.11+ (set PY=python3.11)")'
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(VENV)

# The native core in Rust (driftlog_native: the audit hash chain, a classification fast path). Without cargo,
# or if the build fails, driftlog runs the definitions instead (Python chain, SQL classification): the same
# results, a slower sink and verify (README, "Native core"). The stamp is only made by a successful build, so
# a later run tries again; DRIFTLOG_REQUIRE_NATIVE=1 (CI) makes a failure fatal.
$(NATIVE): $(VENV) native/Cargo.toml native/Cargo.lock native/pyproject.toml native/driftlog_native.pyi $(wildcard native/src/*.rs native/src/*/*.rs)
	@if ! command -v cargo >/dev/null 2>&1; then \
		echo "note: cargo not found, so the native core is not built: driftlog runs slower without it"; \
		test "$$DRIFTLOG_REQUIRE_NATIVE" != 1; \
	elif echo "building the native core (native/, Rust) into $(VENV)" && $(BIN)/pip install --quiet ./native; then \
		touch $@; \
	else \
		echo "warning: building the native core failed (see above): driftlog runs slower without it"; \
		test "$$DRIFTLOG_REQUIRE_NATIVE" != 1; \
	fi

# The engine's native paths each have a Python definition they equal bit for bit
# (tests/unit/test_native_records.py: the same records); the second run tests those definitions, what runs
# without cargo, on their own.
NATIVE_DEFINITIONS := test_codes.py test_stepgraph.py test_stepgraph_layouts.py test_medians.py test_grouped_medians.py \
	test_timeline_order.py test_decompose_rows.py test_analyze_parquet.py test_changepoint.py
NATIVE_DEFINITIONS += test_stepgraph_blocking.py test_stepgraph_timestamps.py  # (the step graph's native draft)
NATIVE_DEFINITIONS += test_whatif_roles.py test_engine_jobs.py  # (roles fitted to a step; one-job batches by classes)
NATIVE_DEFINITIONS += test_fpmath.py  # (the C library's functions over arrays)
NATIVE_DEFINITIONS += test_timeline.py  # (a batch split by epoch)
SAME_RECORDS := tests/unit/test_same_records.py::test_records_depend_on_the_input_only

# Unit tests run on two processes (pytest-xdist, a module per process at a time: its fixtures built once); the
# integration tests, which share one broker and time their workers, run on one.
test: $(NATIVE)
	$(BIN)/pytest -q -n 2 --dist loadfile tests/unit
	$(BIN)/pytest -q tests/integration
	DRIFTLOG_NATIVE=0 DRIFTLOG_REQUIRE_NATIVE=0 $(BIN)/pytest -q $(addprefix tests/unit/,$(NATIVE_DEFINITIONS)) \
		'$(SAME_RECORDS)[several-jobs]' '$(SAME_RECORDS)[realistic-slow-rank-and-link]'

unit: $(NATIVE)
	$(BIN)/pytest -q -n 2 --dist loadfile tests/unit

integration: $(NATIVE)
	$(BIN)/pytest -q -m integration tests/integration

lint: $(NATIVE)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

demo: $(NATIVE)
	$(BIN)/driftlog demo

# Throughput figures of issue 15 (bench/suite.py): one table, and JSON in bench-results.json. Not part of
# `make test`; `bench-smoke` is its one-minute form (a test runs it too: tests/integration/test_bench_smoke.py).
bench: $(NATIVE)
	$(BIN)/python bench/suite.py --repeats 3 --json bench-results.json

bench-smoke: $(NATIVE)
	$(BIN)/python bench/suite.py --smoke --json bench-smoke.json

kafka-start: $(NATIVE)
	$(BIN)/driftlog kafka start

kafka-stop: $(NATIVE)
	$(BIN)/driftlog kafka stop

clean:
	rm -rf $(VENV) native/target .pytest_cache .mypy_cache .ruff_cache driftlog-demo.duckdb
