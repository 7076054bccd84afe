"""Property tests: the title matcher, every reward and every scorer total over arbitrary model output.

Completions mix NUL and other control characters, lone surrogates, reasoning tags, list markers,
catalog titles and megabyte runs. Nothing may raise, rewards stay in [-1, 1] (or None: not
applicable) and every reported metric stays within its scale. Fixed seed, bounded examples.
"""

import math
import tempfile
from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rectune.benchmarks import Resources, get_benchmark
from rectune.benchmarks.llmrec import build
from rectune.benchmarks.perrec import groups
from rectune.benchmarks.recbench.release import read_release
from rectune.core.io import write_json
from rectune.data.catalog import KnowledgeGraph
from rectune.data.mentions import parse_mentions
from rectune.data.rating_store import RatingStore
from rectune.data.ratings import read_items, read_reviews
from rectune.data.titles import CatalogItem, TitleMatcher
from rectune.evaluation.scoring import score_benchmark
from rectune.training.rewards import resolve_rewards

ROOT = Path(__file__).resolve().parents[1]  # tests/
FUZZ = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow], database=None
)


@cache
def worlds() -> dict[str, tuple[list, Resources]]:
    """Canonical rows of each benchmark and their resources, built in-process from the test fixtures."""
    release = read_release(ROOT / "fixtures" / "recbench", "movie")
    recbench = (release.rows, Resources.loaded(TitleMatcher(release.catalog), release.kg))

    ratings = ROOT / "fixtures" / "ratings"
    reviews, items = read_reviews(ratings / "ratings.dat"), read_items(ratings / "movies.dat")
    settings = groups.GroupSettings(min_history=2, k=1)
    found = list(groups.find_groups(RatingStore(reviews, {}), settings))
    groups.attach_prompts(found, RatingStore(reviews, {}), items, settings)
    perrec = ([row for g in found for row in groups.group_record(g, items, "movies").rows()], Resources.loaded())

    amazon = ROOT / "fixtures" / "amazon"
    items = read_items(amazon / "meta_2018.json")
    with RatingStore(amazon / "reviews_2018.json", {}, with_text=True) as store:
        train, test, core, _ = build.build_rows(store, items, "beauty", build.BuildSettings(num_candidates=4), 0)
    llmrec = (train + test, Resources.loaded(TitleMatcher(build.catalog(core["item_ids"], items)), KnowledgeGraph()))
    return {"recbench+": recbench, "perrecbench": perrec, "llmrec": llmrec}


def fragments() -> st.SearchStrategy[str]:
    titles = ["Heat (1995)", "The Usual Suspects", "Alien", "Rose Face Cream", "Usual Suspects, The"]
    tags = ["<think>", "</think>", "<THINK>", "\n", "1. ", "- ", "**", "A > B > C", "4.5", "B", ", ", ": "]
    controls = ["\x00", "\x00\x00", "\x07", "\x1b[31m", "\ufeff", "\u200b", "\r\n"]
    surrogates = st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)
    return st.one_of(st.sampled_from(titles + tags + controls), surrogates, st.text(max_size=30))


completions = st.lists(fragments(), max_size=25).map("".join)
MATCHER = TitleMatcher([CatalogItem("1", "Heat (1995)"), CatalogItem("2", "Usual Suspects, The (1995)")])


def rft_columns(name: str) -> tuple[list, dict]:
    rows, resources = worlds()[name]
    benchmark = get_benchmark(name)
    return rows, {column: [labels[column] for labels in benchmark.labels(rows)] for column in benchmark.label_columns}


def check_rewards(name: str, texts: list[str]) -> None:
    rows, columns = rft_columns(name)
    n = min(len(rows), len(texts))
    funcs, names = resolve_rewards(get_benchmark(name), list(get_benchmark(name).rewards), worlds()[name][1])
    for func, reward in zip(funcs, names, strict=True):
        values = func(texts[:n], **{column: values[:n] for column, values in columns.items()})
        assert len(values) == n, reward
        for value in values:
            assert value is None or (math.isfinite(value) and -1.0 <= value <= 1.0), (reward, value)


def check_scores(name: str, texts: list[str]) -> None:
    rows, resources = worlds()[name]
    predictions = {row.id: texts[i % len(texts)] for i, row in enumerate(rows)}
    report, table = score_benchmark(rows, predictions, resources)
    with tempfile.TemporaryDirectory() as folder:  # reports are written as UTF-8: no lone surrogate may reach them
        write_json(Path(folder) / "report.json", report, line_per_item=("per_query",))
        write_json(Path(folder) / "table.json", table)
    specs = get_benchmark(name).metrics
    for summary in [report["overall"], *report["by_task"].values()]:
        for metric, spec in specs.items():
            value = summary.get(metric)
            if value is None:
                continue
            low, high = spec.limits
            assert math.isfinite(value) and low - 1e-9 <= value <= (high if high is not None else math.inf) + 1e-9, (
                metric,
                value,
            )


@FUZZ
@given(st.lists(completions, min_size=1, max_size=6))
def test_matcher_total_over_arbitrary_text(texts):
    matcher = MATCHER  # one matcher for every example, so its caches see them all, as in a GRPO run
    texts = texts + ["\x00" + text for text in texts]
    for extraction in matcher.extract_many(texts):
        assert len(extraction.item_ids) == len(set(extraction.item_ids))
        assert all(item in matcher.items for item in extraction.item_ids)
    for text in texts:
        matcher.resolve(text)
        matcher.resolve(text, fuzzy=False)


@FUZZ
@given(st.lists(completions, min_size=1, max_size=8))
def test_rewards_total_over_arbitrary_text(texts):
    for name in worlds():
        check_rewards(name, texts)


@FUZZ
@given(st.lists(completions, min_size=1, max_size=8))
def test_scorers_total_over_arbitrary_text(texts):
    for name in worlds():
        check_scores(name, texts)


@FUZZ
@given(st.lists(st.one_of(fragments(), st.just("[SEP]"), st.just(" [SEP] ")), max_size=25).map("".join),
       st.sampled_from([None, 3]))  # fmt: skip
def test_the_authors_scorer_total_over_arbitrary_text(text, k):
    rows, resources = worlds()["recbench+"]
    official = Resources.loaded(resources.matcher(), resources.kg(), convention="official", top_k=k)
    report, _ = score_benchmark(rows, {row.id: text for row in rows}, official)
    for summary in [report["overall"], *report["by_task"].values()]:
        assert all(0 <= summary[m] <= 1 for m in ("precision", "recall", "ftr"))
        assert summary["cmr"] is None or 0 <= summary["cmr"] <= 1
        # their NDCG counts a repeated hit at each position: past 1 where an answer repeats one
        assert math.isfinite(summary["ndcg"]) and summary["ndcg"] >= 0


def test_megabyte_completions():
    huge = ["1. Heat (1995)\n" * 70_000, "\x00" * 1_000_000, "<think>" + "x" * 1_000_000, "\ud800" * 500_000]
    for name in worlds():
        check_rewards(name, huge)
        check_scores(name, huge)


def test_a_completion_of_year_after_year_is_read_without_recursing():
    # "1985: The Shining" is the title with its year; 2,000 years in a row (12 kB) once took one call a year
    repeated = "1. " + "1901: " * 2000 + "Heat"
    assert parse_mentions(repeated) == ["Heat (1901)"]
    assert parse_mentions("1. 1985: 1984: The Shining") == ["The Shining (1984)"]  # the innermost year
    for name in worlds():
        check_rewards(name, [repeated])
        check_scores(name, [repeated])


def test_the_nul_completions_that_crashed_the_matcher():
    matcher = TitleMatcher([CatalogItem("1", "abc")])
    # "\0" + "\0abc" once collided with the exact-lookup cache key of "\0\0abc"
    assert [e.item_ids for e in matcher.extract_many(["\x00abc", "\x00\x00abc", "abc"])] == [["1"], ["1"], ["1"]]
