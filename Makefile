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
	$(BIN)/ruff check lousho_sessions tests benchmarks examples
	$(BIN)/ruff format --check lousho_sessions tests benchmarks examples
	$(BIN)/mypy

bench: $(STAMP)
	@for f in benchmarks/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

soak: $(STAMP)
	LOUSHO_SOAK=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m slow --timeout=3600

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
