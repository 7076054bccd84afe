"""GRPO's generation_kwargs shape how rollout tokens are sampled and nothing else: what would change a rollout
(beams, several sequences a row, dictionaries, stop strings, a clock, other decoders, token ids past the
vocabulary) is one line before the run claims its folder, and the sampling settings train; so does a recipe's
own cache_implementation."""

import math
from types import SimpleNamespace

import pytest
from conftest import one_step_grpo_recipe, run_script

from rectune.core.io import RecTuneError
from rectune.training.generation_kwargs import check_generation_kwargs, generation_kwargs_problem


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"num_beams": 2}, "'num_beams' would change what a rollout is"),
        ({"do_sample": False}, "'do_sample' would change what a rollout is"),
        ({"max_new_tokens": 9}, "'max_new_tokens' would change what a rollout is"),
        ({"typical_p": 2}, "'typical_p': 2 must lie in (0, 1]"),
        ({"temperature": 0}, "'temperature': 0 must lie in (0, inf)"),
        ({"top_p": math.nan}, "'top_p': nan must lie in (0, 1]"),
        ({"top_k": 2.5}, "'top_k': 2.5 is not a whole number"),
        ({"repetition_penalty": True}, "'repetition_penalty': True is not a number"),
        ({"renormalize_logits": 1}, "'renormalize_logits': 1 is not true or false"),
        ({"bad_words_ids": [[]]}, "'bad_words_ids': [[]] is not a list of non-empty lists of token ids"),
        ({"bad_words_ids": [7]}, "'bad_words_ids': [7] is not a list of non-empty lists of token ids"),
        ({"suppress_tokens": [-5]}, "'suppress_tokens': -5 is no token id"),
        ({"suppress_tokens": [3, 40]}, "'suppress_tokens': token id 40 is past the model's 40 tokens"),
        ([1], "a list, not a mapping of sampling settings to values"),
    ],
)
def test_what_would_change_a_rollout_is_named(kwargs, words):
    assert words in generation_kwargs_problem(kwargs, 40)


def test_sampling_settings_are_taken_and_vllm_is_left_to_vllm():
    sampling = {"top_k": 4, "typical_p": 0.9, "suppress_tokens": [39], "bad_words_ids": [[7, 8]], "min_p": 0.0}
    assert generation_kwargs_problem(sampling, 40) is None and generation_kwargs_problem(None, 40) is None
    assert generation_kwargs_problem({"suppress_tokens": [10**6]}, None) is None  # a hub model's vocabulary: unknown
    check_generation_kwargs(SimpleNamespace(use_vllm=True, generation_kwargs={"n": 2}), 40, "r.yaml")
    with pytest.raises(RecTuneError, match=r"^r.yaml: key 'generation_kwargs': 'n' would change"):
        check_generation_kwargs(SimpleNamespace(use_vllm=False, generation_kwargs={"n": 2}), 40, "r.yaml")


def test_a_recipe_asking_for_beams_stops_before_the_run_claims_its_folder_and_sampling_trains(
    tmp_path, tiny_model, train_data
):
    data = train_data / "train_rft.jsonl"
    beams = one_step_grpo_recipe(
        tmp_path / "b.yaml", tiny_model, data, tmp_path / "b", generation_kwargs={"num_beams": 2}
    )
    refused = run_script("train/grpo.py", beams, check=False)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and not (tmp_path / "b").exists()
    assert "key 'generation_kwargs': 'num_beams' would change what a rollout is" in refused.stderr.splitlines()[-1]
    sampling = {"top_k": 8, "suppress_tokens": [5], "bad_words_ids": [[7, 8]], "no_repeat_ngram_size": 3}
    recipe = one_step_grpo_recipe(tmp_path / "s.yaml", tiny_model, data, tmp_path / "s", generation_kwargs=sampling)
    run_script("train/grpo.py", recipe)
    assert (tmp_path / "s" / "finished.json").is_file()


def test_a_recipes_own_cache_trains_with_each_completion_prefilling_its_prompt(tmp_path, tiny_model, train_data):
    """generate takes a cache_implementation or a prefilled cache, not both: a ValueError at the first step."""
    data = train_data / "train_rft.jsonl"
    recipe = one_step_grpo_recipe(tmp_path / "c.yaml", tiny_model, data, tmp_path / "c", cache_implementation="static")
    result = run_script("train/grpo.py", recipe)
    assert "rollouts: cache_implementation 'static': each completion prefills its prompt itself" in result.stderr
    assert (tmp_path / "c" / "finished.json").is_file()
