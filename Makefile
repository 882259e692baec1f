# Two commands on a fresh machine:
#   make demo   - install into .venv, build the demo bundle, run the daemon on a simulated SO-101 arm
#   make test   - install into .venv (and LeRobot 0.6 into .venv-lerobot-0.6), run the test suite
# and one on the robot (as root; see docs/deployment.md):
#   make install - the service's venv in /opt/lerobot-runtime, its config, unit, sysusers and udev files
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# make install: ROOT stages everything under another root (for packaging; the venv then
# only runs from there); EXTRAS adds optional parts (e.g. EXTRAS=executorch); PIP_FLAGS goes to pip.
ROOT      ?=
OPT       := $(ROOT)/opt/lerobot-runtime
EXTRAS    ?=
PIP_FLAGS ?=

# LeRobot 0.6 (what checkpoints are trained with since August 2026) needs Python >= 3.12, torch < 2.12 and
# transformers 5.x, beside ExecuTorch's torch 2.13 here: it gets a venv of its own, in which `export --lerobot`
# traces 0.6 checkpoints (runtime.export.lerobot.stacks); 0.4 checkpoints are traced in .venv.
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12))
STACK06   := .venv-lerobot-0.6
STAMP06   := $(STACK06)/.installed

.PHONY: demo test lint bench mutation venv lerobot-stacks install install-verify clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	PIP_NO_CACHE_DIR=1 $(BIN)/pip install --quiet --upgrade pip
	# LeRobot (for export --lerobot and its tests) pins an older torch, and transformers (SmolVLA's VLM)
	# an older huggingface-hub than datasets needs: both go in without their dependencies, and the
	# lerobot and smolvla extras bring what they import
	PIP_NO_CACHE_DIR=1 $(BIN)/pip install --quiet --no-deps lerobot==0.4.4 transformers==4.57.6
	PIP_NO_CACHE_DIR=1 $(BIN)/pip install --quiet -e '.[export,dev,lerobot,smolvla,language]'
	touch $(STAMP)

venv: $(STAMP)

$(STAMP06):
	@test -n "$(PYTHON312)" || { echo "LeRobot 0.6 needs Python 3.12: set PYTHON312=/path/to/python3.12"; exit 1; }
	$(PYTHON312) -m venv $(STACK06)
	PIP_NO_CACHE_DIR=1 $(STACK06)/bin/pip install --quiet --upgrade pip
	PIP_NO_CACHE_DIR=1 $(STACK06)/bin/pip install --quiet 'lerobot[smolvla]==0.6.1' transformers==5.5.4 torch==2.11.0
	touch $(STAMP06)

lerobot-stacks: $(STAMP06)

# The daemon with the demo bundle and the simulated arm, fed by a synthetic camera; from another
# terminal, `.venv/bin/lerobot-runtime control start` makes the arm move.
demo: $(STAMP)
	$(BIN)/lerobot-runtime camera --synthetic & cam=$$!; trap 'kill $$cam 2>/dev/null' EXIT INT TERM; \
	$(BIN)/lerobot-runtime serve

test: $(STAMP) $(STAMP06)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check runtime drivers tests tools
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/lerobot-runtime bench engine
	$(BIN)/lerobot-runtime bench serve
	$(BIN)/lerobot-runtime bench bus
	$(BIN)/lerobot-runtime bench loop
install:
	$(PYTHON) -m venv $(OPT)/.venv
	PIP_NO_CACHE_DIR=1 $(OPT)/.venv/bin/pip install --quiet $(PIP_FLAGS) '.$(if $(EXTRAS),[$(EXTRAS)])'
	install -D -m 0644 systemd/lerobot-runtime.service $(ROOT)/etc/systemd/system/lerobot-runtime.service
	install -D -m 0644 systemd/sysusers.d/lerobot-runtime.conf $(ROOT)/usr/lib/sysusers.d/lerobot-runtime.conf
	install -D -m 0644 systemd/udev/60-lerobot-runtime.rules $(ROOT)/etc/udev/rules.d/60-lerobot-runtime.rules
	install -d -m 0755 $(ROOT)/etc/lerobot-runtime
	# an existing config is the operator's: never overwritten
	test -e $(ROOT)/etc/lerobot-runtime/config.toml || \
		install -m 0644 configs/robot.toml $(ROOT)/etc/lerobot-runtime/config.toml
	systemd-sysusers $(if $(ROOT),--root=$(ROOT)) $(ROOT)/usr/lib/sysusers.d/lerobot-runtime.conf
	# the running system only (not a staged ROOT): pick up the new rule and unit
	if [ -z "$(ROOT)" ]; then udevadm control --reload && udevadm trigger --subsystem-match=tty || \
		echo "udev is not running here: the rule applies from the next boot"; fi
	if [ -z "$(ROOT)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi

# What a container allows of checking a robot install (run after `make install`, as root).
UNIT ?= $(ROOT)/etc/systemd/system/lerobot-runtime.service
install-verify:
	id lerobot
	id -nG lerobot | grep -qw dialout
	$(OPT)/.venv/bin/lerobot-runtime --version
	systemd-analyze verify $(UNIT)
	systemd-analyze security --offline=yes --threshold=30 $(UNIT)

# Mutation testing of the safety-critical modules (slow: minutes per module on 2 cores; not in CI).
# SCOPES="parity codec" runs some. Each run is recorded in docs/mutation-ledger.json, rendered into
# docs/mutation-ledger.md (every scope, its survivors' verdicts) and the score table of docs/testing.md.
mutation: $(STAMP)
	$(BIN)/python tools/mutation.py $(SCOPES)

clean:
	rm -rf $(VENV) $(STACK06) .pytest_cache .mypy_cache .ruff_cache .mutation
