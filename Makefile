PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test cover lint bench peers soak docs clean

$(STAMP): pyproject.toml setup.cfg
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,examples,celery,encryption,otel,postgres,redis]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m lousho_sessions.demo

# on 3 pytest-xdist workers: most tests wait on processes, sockets and servers, so 3
# pay on 2 cores; tests sharing a module's fixture are kept together (xdist_group)
test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 3 --dist loadgroup

# the suite under coverage (configured in setup.cfg), subprocesses included
cover: $(STAMP)
	rm -f .coverage .coverage.*
	$(BIN)/coverage run -m pytest -q -p no:cacheprovider
	$(BIN)/coverage combine -q
	$(BIN)/coverage report

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	@for f in benchmarks/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# the peers the Postgres and Redis benchmarks compare against, in a venv of their own
PEERS_VENV := .peers-venv
PEERS_STAMP := $(PEERS_VENV)/.installed

$(PEERS_STAMP): benchmarks/peers/requirements.txt
	$(PY) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q --upgrade pip
	$(PEERS_VENV)/bin/pip install -q -r benchmarks/peers/requirements.txt
	touch $(PEERS_STAMP)

peers: $(PEERS_STAMP)

# no --quiet: it hides the warnings that --strict counts, and the build passes anyway
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# 500 randomized crash trials, then the slow-marked stress tests (more rounds, processes, turns)
soak: $(STAMP)
	LOUSHO_SOAK=1 $(BIN)/python -m pytest -q -p no:cacheprovider --timeout=3600 tests/test_crash.py -k randomized
	LOUSHO_SOAK=1 $(BIN)/python -m pytest -q -p no:cacheprovider --timeout=3600 -m slow

clean:
	rm -rf $(VENV) $(PEERS_VENV) .mypy_cache .ruff_cache .pytest_cache site .coverage .coverage.*
