"""Property tests: files from strangers with one value replaced by a value of another type are refused in one
line (a RecTuneError) or, when accepted, used without a crash.

Each surface is one a shared or hand-edited file reaches: canonical rows (then prompts, training examples,
scoring and the RFT labels), an RFT example's label columns (then every reward), a report (then compare's
paired intervals) and a recipe (then its parse). One value anywhere in one record becomes null, a bool, a
number, a string, a list or a mapping, or is deleted. Fixed seed, bounded examples.
"""

import contextlib
import json
import tempfile
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fuzz import FUZZ, ROOT, worlds
from trl import DatasetMixtureConfig, ModelConfig, SFTConfig

from rectune.benchmarks import get_benchmark, load_rows
from rectune.core.io import RecTuneError
from rectune.evaluation.compare import comparison_rows
from rectune.evaluation.report_files import report_problem
from rectune.evaluation.scoring import score_benchmark
from rectune.training.arguments import RunArguments
from rectune.training.recipes import parse_recipe
from rectune.training.rewards import resolve_rewards

FUZZ_MORE = settings(FUZZ, max_examples=400)  # a row has many places: one crash in a few hundred
DELETE = object()
REPLACEMENTS = [None, True, False, 0, -1, 7, 2.5, float("nan"), float("inf"), "", "x", [], {}, [1], ["a"], [None],
                [[1]], [{}], {"a": 1}, DELETE]  # fmt: skip


def places(value: object, path: tuple = ()) -> list[tuple]:
    """Every path into a JSON value (a list's first three items)."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += places(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:3]):
            found += places(inner, (*path, index))
    return found


@st.composite
def mutated(draw: st.DrawFn, record: dict) -> dict:
    """``record`` with one value, anywhere in it, replaced or deleted."""
    record = json.loads(json.dumps(record))
    path = draw(st.sampled_from(places(record)))
    replacement = draw(st.sampled_from(REPLACEMENTS))
    parent = record
    for step in path[:-1]:
        parent = parent[step]
    if replacement is DELETE and isinstance(parent, dict):
        del parent[path[-1]]
    elif replacement is not DELETE:
        parent[path[-1]] = replacement
    return record


def refused_or_used(use, *args) -> None:
    with contextlib.suppress(RecTuneError):  # refused in one line: the scripts print it so
        use(*args)


def use_rows(name: str, lines: list[dict]) -> None:
    """Load the rows, then build every prompt, SFT and RFT example, label and score from them."""
    benchmark, resources = get_benchmark(name), worlds()[name][1]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        rows = load_rows(path)
    for row in rows:
        benchmark.messages(row, {})
        benchmark.sft_example(row, {})
    for labels in benchmark.labels(rows):
        assert benchmark.label_problem(labels) is None  # what a benchmark writes, it accepts
    benchmark.rft_examples(rows, {})
    score_benchmark(rows, {row.id: benchmark.answer(row, {}) for row in rows}, resources)


@FUZZ_MORE
@given(st.data())
def test_a_row_with_a_value_of_another_type_is_refused_or_used(data):
    name = data.draw(st.sampled_from(sorted(worlds())))
    lines = [row.to_dict() for row in worlds()[name][0][:6]]
    index = data.draw(st.integers(0, len(lines) - 1))
    lines[index] = data.draw(mutated(lines[index]))
    refused_or_used(use_rows, name, lines)


def use_labels(name: str, labels: dict) -> None:
    """Check the labels as training does before it starts, then give them to every reward of the benchmark."""
    benchmark, resources = get_benchmark(name), worlds()[name][1]
    problem = benchmark.label_problem(labels)
    if problem:
        raise RecTuneError(problem)
    completion = [[{"role": "assistant", "content": text}] for text in ("Heat (1995)", "B > A", "4", "")]
    funcs, _ = resolve_rewards(benchmark, list(benchmark.rewards), resources)
    for func in funcs:
        func(completions=completion, **{column: [value] * len(completion) for column, value in labels.items()})


@FUZZ
@given(st.data())
def test_rft_labels_of_another_type_are_refused_before_any_reward_reads_them(data):
    name = data.draw(st.sampled_from(sorted(worlds())))
    rows = worlds()[name][0]
    labels = get_benchmark(name).labels(rows)
    refused_or_used(use_labels, name, data.draw(mutated(labels[data.draw(st.integers(0, len(labels) - 1))])))


def use_report(report: dict, baseline: dict) -> None:
    """Check the report as compare loads it, then compare it with paired intervals against the one it came from."""
    problem = report_problem(report)
    if problem:
        raise RecTuneError(problem)
    comparison_rows({"edited": report, "base": baseline}, baseline="base", samples=20)


@FUZZ
@given(st.data())
def test_a_report_with_a_value_of_another_type_is_refused_or_compared(data):
    name = data.draw(st.sampled_from(sorted(worlds())))
    rows, resources = worlds()[name]
    benchmark = get_benchmark(name)
    report, _ = score_benchmark(rows, {row.id: benchmark.answer(row, {}) for row in rows}, resources)
    report = json.loads(json.dumps({key: value for key, value in report.items() if key != "table"}))
    refused_or_used(use_report, data.draw(mutated(report)), report)


RECIPE = yaml.safe_load((ROOT.parent / "recipes" / "smollm2_movie_cpu.yaml").read_text())


@FUZZ
@given(st.data())
def test_a_recipe_value_of_another_type_is_refused_or_parsed(data):
    recipe = data.draw(mutated(RECIPE))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.yaml"
        path.write_text(yaml.safe_dump(recipe))
        refused_or_used(parse_recipe, (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments), [str(path)])
