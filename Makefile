PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench soak docs clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m lousho_sessions.demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	@for f in benchmarks/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# 500 randomized crash trials and the slow-marked stress tests
soak: $(STAMP)
	LOUSHO_SOAK=1 $(BIN)/python -m pytest -q -p no:cacheprovider --timeout=3600 tests/test_crash.py -k randomized
	LOUSHO_SOAK=1 $(BIN)/python -m pytest -q -p no:cacheprovider --timeout=3600 -m slow

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
