"""Training views derived from the canonical rows equal what data_prep used to store, and old folders load.

``tests/fixtures/prepared_v1`` holds the training files data_prep wrote before it stored each row once
(made by that version from the same sources and flags as below). Deriving them now must give the same
prompts, targets and reward labels.
"""

import json
import os
import re

import pytest
from conftest import ROOT, read_jsonl, run_script, write_recipe

from rectune.core.io import DataError
from rectune.training.views import data_files, load_examples, prepared_file, view_examples

FIXTURES = ROOT / "tests" / "fixtures"
STORED = FIXTURES / "prepared_v1"
SOURCES = {
    "perrec": ("data_prep/perrecbench.py", "--reviews", FIXTURES / "ratings/ratings.dat", "--items",
               FIXTURES / "ratings/movies.dat", "--domain", "beauty", "--min-history", "2", "--k", "1",
               "--test-size", "0.0", "--valid-size", "0.5"),
    "recbench": ("data_prep/recbench.py", "--src", FIXTURES / "recbench", "--domain", "movie", "--test-size", "0.3",
                 "--valid-size", "0.3", "--with-history"),
    "llmrec": ("data_prep/llmrec.py", "--reviews", FIXTURES / "amazon/reviews_2018.json", "--items",
               FIXTURES / "amazon/meta_2018.json", "--domain", "beauty", "--num-candidates", "4",
               "--valid-size", "0.5"),
}  # fmt: skip


@pytest.mark.parametrize("benchmark", sorted(SOURCES))
def test_derived_views_equal_the_stored_ones(tmp_path, benchmark):
    script, *flags = SOURCES[benchmark]
    out = tmp_path / benchmark
    run_script(script, *flags, "--out", out)
    assert not list(out.glob("train_*.jsonl")) and not list(out.glob("valid_*.jsonl"))  # each row stored once
    compared = 0
    for stored in sorted(STORED.joinpath(benchmark).glob("*.jsonl")):
        derived = view_examples(out / stored.name)
        before = read_jsonl(stored)
        if benchmark == "llmrec" and "_sft" in stored.name:
            before = [_direct_as_ranked_list(example) for example in before]
        if "_mix" in stored.name:  # the stored mix was shuffled; training shuffles anyway
            derived, before = sorted(map(json.dumps, derived)), sorted(map(json.dumps, before))
        if benchmark == "perrec" and ("pairwise" in stored.name or "listwise" in stored.name):
            # the stored order's examples, each now beside its other order (position-fair rows): twice as many
            assert len(derived) == 2 * len(before) and all(example in derived for example in before), stored.name
        else:
            assert derived == before, stored.name
        compared += len(before)
    assert compared >= 12  # every stored example compared (RecBench+: 5 + 5 train, 1 + 1 validation)


def _direct_as_ranked_list(example: dict) -> dict:
    """A stored LLMRec SFT example as derived now: a direct target is its title, then the prompt's other
    candidates in their order (it was the title alone)."""
    user, answer = example["messages"][1]["content"], example["messages"][2]["content"]
    if not user.startswith("Recommend the item"):
        return example
    listed = user.split("Candidates:\n")[1].split("\n\n")[0].split("\n")
    ranked = "\n".join([answer, *(title for title in listed if title != answer)][:10])
    return {"messages": [*example["messages"][:2], {**example["messages"][2], "content": ranked}]}


def test_training_reads_views_and_old_files(tmp_path):
    from trl import DatasetMixtureConfig
    from trl.scripts.utils import DatasetConfig

    script, *flags = SOURCES["llmrec"]
    out = tmp_path / "llmrec"
    run_script(script, *flags, "--out", out)

    def mixture(*files):
        return DatasetMixtureConfig(datasets=[DatasetConfig(path="json", data_files=[str(f) for f in files])])

    recipe = mixture(out / "train_sft_rating.jsonl", out / "train_sft_direct.jsonl")
    dataset = load_examples(recipe, "sft", None, 0)
    assert len(dataset) == 6 and set(dataset.column_names) == {"prompt", "completion"}
    assert recipe.datasets[0].data_files[0] == str(out / "train_sft_rating.jsonl")  # the recipe is left as named
    # a folder prepared before views keeps loading its stored files
    old = load_examples(mixture(STORED / "llmrec" / "train_rft_mix.jsonl"), "rft", None, 0)
    assert len(old) == 15 and "item_id" in old.column_names
    # --train_data FOLDER: the view of all training rows
    assert prepared_file(out, "train_sft") == out / "train_sft.jsonl"
    assert len(load_examples(mixture(prepared_file(out, "train_sft")), "sft", None, 0)) == 15
    # --train_data DIR/VIEW: a view named as a recipe names it, derived from train.jsonl beside it
    for view in ("train_sft.jsonl", "train_sft_rating.jsonl", "train_rft_mix.jsonl"):
        assert prepared_file(out / view, "train_sft") == out / view and not (out / view).exists()
    with pytest.raises(DataError, match="no such file or folder"):
        prepared_file(out / "train_sft_typo", "train_sft")
    with pytest.raises(DataError, match="an RFT view, but this is SFT training"):
        load_examples(mixture(out / "train_rft_rating.jsonl"), "sft", None, 0)


def test_a_datasets_option_the_library_refuses_is_one_line():
    """A recipe's dataset ``split`` its data_files do not make, or ``columns`` the rows lack: the datasets
    library's ValueError was a traceback, after the run had claimed its folder."""
    from trl import DatasetMixtureConfig
    from trl.scripts.utils import DatasetConfig

    stored = str(STORED / "llmrec" / "train_rft_mix.jsonl")
    for option, line in [
        ({"split": "test"}, "Unknown split \"test\". Should be one of ['train']."),
        ({"columns": ["nope"]}, "Column name ['nope'] not in the dataset."),
    ]:
        mixture = DatasetMixtureConfig(datasets=[DatasetConfig(path="json", data_files=stored, **option)])
        with pytest.raises(DataError) as caught:
            load_examples(mixture, "rft", None, 0)
        assert str(caught.value).startswith(f"recipe: key 'datasets': {line}")


@pytest.mark.parametrize(
    ("mixture_option", "dataset_option", "said"),
    [
        ({"streaming": True}, {}, "key 'streaming': RecTune reads the prepared rows whole"),
        ({"test_split_size": 0.5}, {}, "key 'test_split_size' would take rows out of the training data"),
        ({}, {"path": "csv"}, "datasets[0]: path 'csv': the prepared rows are JSONL (path: json)"),
    ],
)
def test_a_mixture_that_would_not_read_the_prepared_rows_whole_is_one_line(mixture_option, dataset_option, said):
    """Streaming was a TypeError once the run held its folder, a CSV or text builder a traceback; test_split_size
    trained on half the rows, split without a seed, and evaluated on none of the other half."""
    from trl import DatasetMixtureConfig
    from trl.scripts.utils import DatasetConfig

    dataset = DatasetConfig(**{"path": "json", "data_files": str(STORED / "llmrec" / "train_rft_mix.jsonl"),
                               **dataset_option})  # fmt: skip
    with pytest.raises(DataError, match=f"^recipe: {re.escape(said)}"):
        data_files(DatasetMixtureConfig(datasets=[dataset], **mixture_option))


def test_a_data_file_that_is_a_fifo_a_device_or_a_folder_says_what_it_is(tmp_path):
    """Each was "training data file not found (run data_prep first?)", where the file was there."""
    from trl import DatasetMixtureConfig
    from trl.scripts.utils import DatasetConfig

    os.mkfifo(tmp_path / "train_sft.jsonl")
    for name, said in [
        (tmp_path / "train_sft.jsonl", "is a FIFO (named pipe), not a plain file; reading it would wait or never end"),
        ("/dev/zero", "is a character device, not a plain file; reading it would wait or never end"),
        (tmp_path, "is a folder, not a file"),
        (tmp_path / "train_rft.jsonl", "training data file not found (run data_prep first?)"),  # a view of no rows
    ]:
        with pytest.raises(DataError) as caught:
            data_files(DatasetMixtureConfig(datasets=[DatasetConfig(path="json", data_files=str(name))]))
        assert str(caught.value) == f"{name}: {said}"
    for name in (tmp_path / "train_sft.jsonl", "/dev/zero"):  # given as --train_data
        with pytest.raises(DataError, match="not a plain file; reading it would wait or never end$"):
            prepared_file(name, "train_sft")


# PerRecBench rows as data_prep stored them before each group was stored once: one line per format row,
# made by that version with these flags (rows in train.jsonl only: the sizes round the held-out shares to 0)
ROWS_BEFORE = FIXTURES / "prepared_v2" / "perrec"
PERREC_ROWS = ("data_prep/perrecbench.py", "--reviews", FIXTURES / "ratings/ratings.dat", "--items",
               FIXTURES / "ratings/movies.dat", "--domain", "movies", "--min-history", "1", "--window-days", "30",
               "--min-gap", "0.4", "--test-size", "0.3", "--valid-size", "0.3")  # fmt: skip


def test_each_group_is_stored_once_and_expands_to_the_rows_stored_before(tmp_path):
    from rectune.benchmarks import load_rows

    out = tmp_path / "perrec"
    run_script(*PERREC_ROWS, "--out", out)
    stored = read_jsonl(out / "train.jsonl")
    # a 2-user and a 4-user group: once each, not as 3 + 12 rows
    assert [len(g["users"]) for g in stored] == [4, 2] and all("task" not in g for g in stored)
    before = read_jsonl(ROWS_BEFORE / "train.jsonl")
    assert len(before) == 15
    # the rows stored before, each pair and listwise group now beside its other order (position-fair)
    expanded = [row.to_dict() for row in load_rows(out / "train.jsonl")]
    other_order = [row for row in expanded if row not in before]
    # swapped pairs: 6 of the 4-user group, 1 of the 2-user group; one reversed listwise row per group: 9
    assert all(row in expanded for row in before) and len(other_order) == 9
    assert all(row["id"].endswith(("/reversed", "/BA", "/CA", "/DA", "/CB", "/DB", "/DC")) for row in other_order)
    assert [row.to_dict() for row in load_rows(ROWS_BEFORE / "train.jsonl")] == before  # old files still load
    assert view_examples(out / "train_sft_pointwise.jsonl") == view_examples(ROWS_BEFORE / "train_sft_pointwise.jsonl")
    for view in ("train_rft_pairwise", "train_sft_listwise"):
        derived, old = view_examples(out / f"{view}.jsonl"), view_examples(ROWS_BEFORE / f"{view}.jsonl")
        assert len(derived) == 2 * len(old) and all(example in derived for example in old), view


def test_a_second_run_on_the_same_rows_adds_nothing_to_the_caches(tmp_path, monkeypatch, tiny_model, train_data):
    """A derived view is one file in datasets' cache folder, named by its content, so a rerun reuses datasets'
    Arrow cache of it and TRL's tokenization. Each run used to write its view to a new temporary file, and so left a
    new copy of its training data (and of its tokenization) in datasets' cache every time."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))

    def train(out):
        recipe = write_recipe(
            tmp_path / f"{out}.yaml", model_name_or_path=str(tiny_model), use_peft=True, lora_r=4, lora_alpha=8,
            lora_target_modules=["q_proj", "v_proj"], output_dir=str(tmp_path / out), max_steps=1,
            per_device_train_batch_size=2, report_to=["none"], max_length=256,
            datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
        )  # fmt: skip
        run_script("train/sft.py", recipe)
        return {path for path in (tmp_path / "datasets").rglob("*") if not path.name.endswith(".lock")}

    first = train("first")
    assert any(path.name.startswith("cache-") for path in first)  # the tokenization, cached on the first run
    assert train("second") == first
    views = tmp_path / "datasets" / "rectune-views"
    assert [path.name[33:] for path in views.iterdir()] == ["train_sft.jsonl"]
    assert read_jsonl(next(views.iterdir())) == view_examples(train_data / "train_sft.jsonl")


def test_validation_comes_with_eval_on_start_and_an_empty_split_is_one_line(tmp_path):
    """``eval_on_start`` alone evaluates once, so it gets the validation examples (transformers refused it with no
    eval_dataset, a traceback once the model had loaded); a validation split data_prep left empty was datasets'
    bare StopIteration as its JSON loader met the empty view."""
    from types import SimpleNamespace

    from trl import DatasetMixtureConfig
    from trl.scripts.utils import DatasetConfig

    from rectune.training.arguments import RunArguments
    from rectune.training.views import eval_examples

    def prepared(name, valid_size):
        out = tmp_path / name
        run_script("data_prep/recbench.py", "--src", FIXTURES / "recbench", "--domain", "movie", "--test-size", "0.2",
                   "--valid-size", valid_size, "--out", out)  # fmt: skip
        return DatasetMixtureConfig(datasets=[DatasetConfig(path="json", data_files=str(out / "train_sft.jsonl"))])

    start_only, held = SimpleNamespace(eval_strategy="no", eval_on_start=True, seed=0), prepared("held", "0.3")
    never = SimpleNamespace(eval_strategy="no", eval_on_start=False, seed=0)
    assert eval_examples(never, RunArguments(), held, "sft") is None
    assert len(eval_examples(start_only, RunArguments(), held, "sft")) == 3
    with pytest.raises(DataError) as caught:
        eval_examples(start_only, RunArguments(), prepared("none", "0.0"), "sft")
    assert str(caught.value) == (
        f"{tmp_path / 'none' / 'valid_sft.jsonl'}: no examples: valid.jsonl beside it is empty (data_prep held none "
        "out: --valid-size)"
    )
