# Two commands on a fresh machine:
#   make demo   - install into .venv, build the demo bundle, run the daemon on a simulated SO-101 arm
#   make test   - install into .venv, run the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	PIP_NO_CACHE_DIR=1 $(BIN)/pip install --quiet --upgrade pip
	PIP_NO_CACHE_DIR=1 $(BIN)/pip install --quiet -e '.[export,dev]'
	touch $(STAMP)

install: $(STAMP)

# The daemon with the demo bundle and the simulated arm, fed by a synthetic camera; from another
# terminal, `.venv/bin/lerobot-runtime control start` makes the arm move.
demo: $(STAMP)
	$(BIN)/lerobot-runtime camera --synthetic & cam=$$!; trap 'kill $$cam 2>/dev/null' EXIT INT TERM; \
	$(BIN)/lerobot-runtime serve

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check runtime drivers tests
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/lerobot-runtime bench engine
	$(BIN)/lerobot-runtime bench serve
	$(BIN)/lerobot-runtime bench bus
	$(BIN)/lerobot-runtime bench loop

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
