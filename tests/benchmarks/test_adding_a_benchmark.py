"""The README's "Adding a benchmark" and "Adding a reward", followed step by step with a toy benchmark
defined here: registered, prepared, loaded, scored, compared and given rewards, with no edit outside
this file. Then the layering the registry relies on: shared modules never import a benchmark package."""

import ast
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
from conftest import ROOT

from rectune.benchmarks import Benchmark, MetricSpec, Resources, Scored, get_benchmark, load_rows, names, register
from rectune.core.io import DataError, RecTuneError, write_jsonl
from rectune.data.completions import completion_text
from rectune.data.rows import RowChecker
from rectune.evaluation.compare import comparison_rows, markdown, metric_specs
from rectune.evaluation.report_files import load_reports
from rectune.evaluation.scoring import score_files
from rectune.training.rewards import resolve_rewards, rft_rewards
from rectune.training.views import check_examples


# 1. The row: a dataclass with from_dict (validated through RowChecker) and to_dict.
@dataclass
class SumRow:
    id: str
    benchmark: str
    task: str
    question: str
    answer: str

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict, *, path="<row>", line=None) -> "SumRow":
        check = RowChecker(raw, cls, path, line)
        return cls(
            id=check.string("id"),
            benchmark=check.string("benchmark", ("toy-sums",)),
            task=check.string("task", ("small", "large")),
            question=check.string("question"),
            answer=check.string("answer"),
        )


# 2. A reward in TRL's signature: the completions, then the label columns.
def exact(completions, answer, **kwargs) -> list[float]:
    """1.0 when the completion is the answer, else 0.0: ``"5"`` for ``"5"`` = 1.0, ``"6"`` = 0.0."""
    return [float(completion_text(c).strip() == a) for c, a in zip(completions, answer, strict=True)]


# 3. The benchmark: prompts, answers, labels, scoring, its metrics and rewards.
class ToySums(Benchmark):
    name = "toy-sums"
    row_type = SumRow
    tasks = ("small", "large")
    metrics = {"accuracy": MetricSpec("acc"), "length": MetricSpec("chars", "error", higher_is_better=False)}
    rewards = {"exact": exact}
    default_rewards = ("exact",)
    label_columns = ("task", "answer")

    def messages(self, row, variant):
        return [{"role": "system", "content": "Add."}, {"role": "user", "content": row.question}]

    def answer(self, row, variant):
        return row.answer

    def labels(self, rows):
        return [{"task": r.task, "answer": r.answer} for r in rows]

    def score(self, rows, predictions, resources):
        table = [
            {"id": r.id, "task": r.task, "correct": float(predictions[r.id].strip() == r.answer),
             "length": float(len(predictions[r.id]))}
            for r in rows
        ]  # fmt: skip

        def summary(records):
            n = len(records)
            return {"n": n, **{m: sum(t[m] for t in records) / n for m in ("accuracy", "length")}} if n else {"n": 0}

        for record in table:
            record["accuracy"] = record.pop("correct")
        by_task = {task: summary([t for t in table if t["task"] == task]) for task in self.tasks}
        report = {"metrics": list(self.metrics), "overall": summary(table), "by_task": by_task, "per_query": table}
        return Scored(report, table)

    def format_table(self, report):
        return "\n".join(f"| {task} | {s['n']} | {s.get('accuracy')} |" for task, s in report["by_task"].items())


register(ToySums())

ROWS = [
    SumRow("q1", "toy-sums", "small", "2 + 3", "5"),
    SumRow("q2", "toy-sums", "small", "1 + 1", "2"),
    SumRow("q3", "toy-sums", "large", "400 + 500", "900"),
]


@pytest.fixture()
def prepared(tmp_path) -> Path:
    """4. A data_prep script's work: test.jsonl plus SFT and RFT training files."""
    toy = get_benchmark("toy-sums")
    write_jsonl(tmp_path / "test.jsonl", (r.to_dict() for r in ROWS))
    write_jsonl(tmp_path / "train_sft.jsonl", (toy.sft_example(r, {}) for r in ROWS))
    write_jsonl(tmp_path / "train_rft.jsonl", toy.rft_examples(ROWS, {}))
    return tmp_path


def test_a_registered_benchmark_is_found_by_its_rows(prepared):
    assert "toy-sums" in names()
    assert load_rows(prepared / "test.jsonl") == ROWS
    bad = prepared / "bad.jsonl"
    bad.write_text(json.dumps({**ROWS[0].to_dict(), "task": "huge"}) + "\n")
    with pytest.raises(DataError, match="bad.jsonl:1: row 'q1', field 'task': must be one of small, large"):
        load_rows(bad)


def test_training_files_pass_the_training_checks(prepared):
    check_examples(prepared / "train_sft.jsonl", "sft")
    check_examples(prepared / "train_rft.jsonl", "rft")
    example = json.loads((prepared / "train_rft.jsonl").read_text().splitlines()[0])
    assert example == {"prompt": ToySums().messages(ROWS[0], {}), "id": "q1", "benchmark": "toy-sums",
                       "task": "small", "answer": "5"}  # fmt: skip
    without_answer = prepared / "no_answer.jsonl"
    without_answer.write_text(json.dumps({k: v for k, v in example.items() if k != "answer"}) + "\n")
    with pytest.raises(DataError, match="no_answer.jsonl:1: field 'answer': missing"):
        check_examples(without_answer, "rft")


def test_scored_and_compared_by_the_shared_tools(prepared, tmp_path):
    predictions = tmp_path / "predictions.jsonl"
    write_jsonl(predictions, [{"id": "q1", "completion": "5"}, {"id": "q2", "completion": "3"},
                              {"id": "q3", "completion": " 900"}])  # fmt: skip
    report = score_files(prepared / "test.jsonl", predictions, tmp_path / "run" / "report.json")
    # by hand: q1 and q3 right, q2 wrong; lengths 1, 1, 4 characters
    assert report["benchmark"] == "toy-sums"
    assert report["overall"]["accuracy"] == pytest.approx(2 / 3)
    assert report["by_task"]["small"]["accuracy"] == 0.5 and report["by_task"]["large"]["length"] == 4.0
    reports = load_reports([tmp_path / "run"])
    specs = metric_specs(reports)
    assert specs["length"].scale == "error" and not specs["length"].higher_is_better
    assert "| task | checkpoint | n | acc | chars |" in markdown(comparison_rows(reports), specs)


def test_rewards_by_name_default_and_dotted_path(prepared):
    funcs, chosen = rft_rewards([], prepared / "train_rft.jsonl")  # the benchmark's defaults
    assert chosen == ["exact"] and funcs[0](["5", "6"], answer=["5", "5"]) == [1.0, 0.0]
    funcs, chosen = rft_rewards(["exact", "test_adding_a_benchmark.shorter"], prepared / "train_rft.jsonl")
    assert [f.__name__ for f in funcs] == ["exact", "shorter"]
    assert funcs[1](["5", "five"], answer=["5", "5"]) == [1.0, 0.25]
    with pytest.raises(RecTuneError, match="unknown toy-sums reward 'recall'"):
        rft_rewards(["recall"], prepared / "train_rft.jsonl")
    with pytest.raises(RecTuneError, match="cannot import"):
        rft_rewards(["no_such_module.reward"], prepared / "train_rft.jsonl")


def shorter(completions, answer, **kwargs) -> list[float]:
    """A reward named by dotted path in a recipe: 1 / the completion's length in characters."""
    return [1.0 / max(len(completion_text(c)), 1) for c in completions]


def test_resources_are_bound_only_where_a_reward_asks_for_them():
    seen = {}

    def needs_catalog(completions, *, resources, **kwargs):
        seen["resources"] = resources
        return [0.0] * len(completions)

    resources = Resources.loaded(matcher="m")
    funcs, _ = resolve_rewards(ToySums(), [], resources)
    assert funcs == [exact]  # no resources keyword: used as it is
    toy = ToySums()
    toy.rewards = {"needs_catalog": needs_catalog}
    bound, _ = resolve_rewards(toy, ["needs_catalog"], resources)
    assert bound[0].__name__ == "needs_catalog" and bound[0](["x"]) == [0.0] and seen["resources"] is resources


# Layering ------------------------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_shared_modules_never_import_a_benchmark_package():
    benchmark_packages = {_module_name(p.parent) for p in (ROOT / "rectune/benchmarks").glob("*/__init__.py")}
    shared = [p for p in (ROOT / "rectune").rglob("*.py") if ROOT / "rectune/benchmarks" not in p.parents]
    assert len(shared) > 30  # every layer but the benchmarks
    for path in shared:
        imported = _imports(path)
        assert not {m for m in imported for pkg in benchmark_packages if m == pkg or m.startswith(pkg + ".")}, path
    for script in [*(ROOT / "train").glob("*.py"), *(ROOT / "evaluate").glob("*.py")]:
        assert not {m for m in _imports(script) for pkg in benchmark_packages if m == pkg or m.startswith(pkg + ".")}


def test_benchmark_names_appear_only_in_their_packages_and_the_registry():
    own = {"recbench+": "recbench", "perrecbench": "perrec", "llmrec": "llmrec"}
    for path in [*(ROOT / "rectune").rglob("*.py"), *(ROOT / "train").glob("*.py"), *(ROOT / "evaluate").glob("*.py")]:
        if path == ROOT / "rectune/benchmarks/__init__.py":
            continue
        text = path.read_text()
        for name, package in own.items():
            if f'"{name}"' in text:
                assert ROOT / "rectune/benchmarks" / package in path.parents, f"{path} names {name!r}"


def test_no_import_cycles():
    modules = {_module_name(p): p for p in (ROOT / "rectune").rglob("*.py")}
    graph = {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}
    # A package's __init__ may import its own submodules (that is how a benchmark assembles itself).
    graph = {n: {m for m in deps if not m.startswith(n + ".")} for n, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for dep in graph[node]:
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*trail, node, dep]))
            if dep not in state:
                visit(dep, [*trail, node])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [])


def test_a_table_given_as_its_builder_is_built_once_on_first_reading():
    built = []
    scored = Scored({"overall": {}}, lambda: built.append("table") or [{"id": "a"}])
    assert built == []  # scoring a file writes the report only: nothing built
    assert scored.table == [{"id": "a"}] and scored.table is scored.table
    assert built == ["table"]
    assert Scored({}, [{"id": "b"}]).table == [{"id": "b"}]  # the records themselves
