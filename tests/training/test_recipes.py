"""Every shipped recipe parses with its script's arguments; accelerate configs and make targets are wired."""

import subprocess
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from conftest import ROOT
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, SFTConfig

from rectune.benchmarks import get_benchmark
from rectune.training.arguments import RftArguments, RunArguments
from rectune.training.cpu_precision import cpu_has_bfloat16
from rectune.training.recipes import parse_recipe
from rectune.training.shaping import ShapingArguments

RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_parses(recipe):
    if recipe.stem.endswith("_grpo"):
        training, model, mixture, run, rft, shaping, path = parse_recipe(
            (GRPOConfig, ModelConfig, DatasetMixtureConfig, RunArguments, RftArguments, ShapingArguments), [str(recipe)]
        )
        assert shaping.curriculum_reward is None or shaping.curriculum_reward in rft.reward_funcs
        data_file = mixture.datasets[0].data_files
        benchmark = get_benchmark(_recipe_benchmark(recipe.stem))
        assert all(name in benchmark.rewards or "." in name for name in rft.reward_funcs), data_file
        assert training.reward_weights is None or len(training.reward_weights) == len(rft.reward_funcs)
        if recipe.stem != "learn_check_grpo":  # the learn check trains GRPO alone, from the base model
            assert (ROOT / "recipes" / f"{recipe.stem.removesuffix('_grpo')}.yaml").is_file()  # its SFT twin
    else:
        training, model, mixture, run, path = parse_recipe(
            (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments), [str(recipe)]
        )
        assert training.packing
    assert path == recipe and run.recipe_name == recipe.stem
    assert model.use_peft and model.lora_r > 0
    assert mixture.datasets and training.output_dir.startswith("outputs/")
    import torch

    # on a GPU the recipe's own precision stands; without one fp32, or bf16 where the recipe asks for it and the CPU
    # computes it (rectune/training/cpu_precision.py)
    asked = "bf16: true" in recipe.read_text()
    if torch.cuda.is_available():
        assert not training.use_cpu and (training.bf16 or not asked)
    else:
        assert training.use_cpu and training.bf16 == (asked and cpu_has_bfloat16())


def _recipe_benchmark(stem: str) -> str:
    """Recipes are named after their benchmark's data: perrec_*, llmrec_*, else RecBench+."""
    return {"perrec": "perrecbench", "llmrec": "llmrec"}.get(stem.split("_")[0], "recbench+")


def test_cli_flags_override_the_recipe():
    training, *_ = parse_recipe(
        (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments),
        [str(ROOT / "recipes/qwen3b_movie.yaml"), "--learning_rate", "0.5", "--lora_r", "4"],
    )
    assert training.learning_rate == 0.5


def test_a_misspelled_flag_names_the_flag_and_the_closest_field():
    from rectune.core.io import RecTuneError

    with pytest.raises(RecTuneError) as caught:
        parse_recipe(
            (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments),
            [str(ROOT / "recipes/smollm2_movie_cpu.yaml"), "--learnig_rate", "1e-4"],
        )
    message = str(caught.value)
    assert message.startswith("unknown flag --learnig_rate") and message.endswith("did you mean --learning_rate?")
    assert "smollm2_movie_cpu.yaml" not in message  # the recipe is not to blame


def test_paper_recipes_use_the_paper_model():
    for name in ("qwen3b_movie", "qwen3b_movie_grpo", "qwen3b_book", "qwen3b_book_grpo"):
        assert "model_name_or_path: Qwen/Qwen2.5-3B-Instruct" in (ROOT / "recipes" / f"{name}.yaml").read_text()


@pytest.mark.parametrize("config", sorted((ROOT / "accelerate_configs").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_config_loads(config):
    loaded = load_config_from_file(str(config))
    assert loaded.num_processes >= 1


def make_dry_run(*args: str) -> str:
    return subprocess.run(["make", "-n", *args], capture_output=True, text=True, cwd=ROOT, check=True).stdout


def test_make_targets_put_the_three_runs_side_by_side():
    recipe = "RECIPE=recipes/qwen3b_movie.yaml"
    assert (
        "train/sft.py recipes/qwen3b_movie.yaml --recipe_name qwen3b_movie --output_dir outputs/qwen3b_movie/sft"
        in make_dry_run("sft", recipe)
    )
    assert (
        "train/grpo.py recipes/qwen3b_movie_grpo.yaml --recipe_name qwen3b_movie --output_dir "
        "outputs/qwen3b_movie/rft" in make_dry_run("rft", recipe)
    )
    chained = make_dry_run("rft-after-sft", recipe)
    assert chained.index("train/sft.py") < chained.index("train/grpo.py")
    assert "--init_adapter outputs/qwen3b_movie/sft" in chained and "outputs/qwen3b_movie/sft_rft" in chained
    launched = make_dry_run("sft", recipe, "LAUNCH=accelerate launch --config_file accelerate_configs/ddp.yaml")
    assert "accelerate launch --config_file accelerate_configs/ddp.yaml train/sft.py" in launched


def test_the_perrec_experiment_merges_three_ways_and_scores_each_adapter_where_it_was_trained():
    steps = make_dry_run("experiment-perrec")
    assert (
        "for m in linear ties dare_ties" in steps and "--method $m --out outputs/perrec_experiment/merged-$m" in steps
    )
    assert "--init_adapter outputs/perrec_experiment/mix" in steps
    assert steps.index("--init_adapter") > steps.rindex("train/sft.py")
    for adapter, task in (("point", "pointwise"), ("pair", "pairwise"), ("list", "listwise")):
        assert f"--model outputs/perrec_experiment/{adapter} --task {task}" in steps
    assert "--baseline base --by-difficulty" in steps and "--baseline mix" in steps


def test_the_llmrec_experiment_scores_everything_on_the_same_sample():
    steps = make_dry_run("experiment-llmrec")
    assert steps.count("--sample 500") >= 3  # base, SFT and the baselines' arguments
    assert "--baseline base" in steps and "--baseline baseline:popularity" in steps


def test_recipe_data_paths_match_make_data_targets():
    makefile = Path(ROOT / "Makefile").read_text()
    for recipe in RECIPES:
        data_dir = next(line for line in recipe.read_text().splitlines() if "data_files:" in line).split()[-1]
        assert f"--out {Path(data_dir).parent}" in makefile, recipe.name
