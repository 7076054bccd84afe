"""Turn a RecBench+ checkout into RecTune's training and evaluation files.

    python data_prep/recbench.py --src ROOT --domain movies --out data/recbench_movie

Writes catalog.jsonl, kg.jsonl, the canonical rows train.jsonl, valid.jsonl and test.jsonl, stats.json
(with the prompt options) and a dataset card (README.md) into --out, built whole beside it and swapped
in, so an interruption leaves the old set or the new one. Recipes name the training views
train_sft.jsonl, train_rft.jsonl, valid_sft.jsonl and valid_rft.jsonl: training derives them from the
rows with the prompt options of stats.json (rectune/training/views.py), so no prompt is stored twice.
With --candidates N each query's prompt lists N items a BM25 retriever found for its text (grounded
prompts; --candidate-order retriever lists them best first); stats.json records the retriever's recall@N
per task. With --k K too, SFT targets name exactly K candidates, the true ones first. --rerec builds the
ReRec protocol instead (rectune/benchmarks/recbench/rerec.py): one true item and 19 others per query, one
boxed pick.
"""

import argparse
import logging

from rectune.benchmarks.recbench import BENCHMARK
from rectune.benchmarks.recbench.grounding import ORDERS, attach_candidates, retriever_recall
from rectune.benchmarks.recbench.release import read_release, split_rows, stats
from rectune.benchmarks.recbench.rerec import NEGATIVES, PROTOCOL, attach_rerec_candidates
from rectune.benchmarks.recbench.rows import TASKS
from rectune.core.cli import (
    ArgumentParser,
    add_output_arguments,
    build_summary,
    fraction,
    non_negative_int,
    positive_int,
    run,
)
from rectune.core.io import RecTuneError, write_json, write_jsonl
from rectune.core.outputs import claim_output, output_set
from rectune.data.catalog import catalog_rows, kg_rows
from rectune.models.sharing import write_dataset_card

KIND = "recbench+ data"


def parse_args() -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "--src",
        required=True,
        help="RecBench+ release: the folder holding dataset/<domain>/ (or data/<domain>/ in older checkouts)",
    )
    parser.add_argument(
        "--domain",
        required=True,
        choices=["movies", "books", "movie", "book"],
        help="movies or books, as the other benchmarks' --domain (the singular, the release's folder name, works too)",
    )
    add_output_arguments(parser)
    parser.add_argument("--test-size", type=fraction, default=0.2, help="fraction of queries held out (1.0 = all)")
    parser.add_argument(
        "--valid-size", type=fraction, default=0.05, help="fraction of the training queries held out for validation"
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--history", type=non_negative_int, default=20, help="history items kept per query (most recent)"
    )
    parser.add_argument("--with-history", action="store_true", help="put the history into training prompts")
    parser.add_argument("--k", type=positive_int, default=None, help="fixed-K prompt variant (paper Appendix F)")
    parser.add_argument(
        "--candidates",
        type=int,
        default=None,
        metavar="N",
        help="grounded prompts: N candidate items per query, found by BM25 over titles, catalog attributes and "
        "the --kg file's facts from the query text alone (stats.json records the retriever's recall@N per task)",
    )
    parser.add_argument(
        "--candidate-facts", action="store_true", help="with --candidates: each candidate's KG facts in the prompt"
    )
    parser.add_argument(
        "--candidate-order",
        choices=ORDERS,
        default="title",
        help="with --candidates: list them by title, or in the retriever's order, best first (a reranking prompt)",
    )
    parser.add_argument(
        "--rerec",
        action="store_true",
        help="the ReRec protocol: 20 candidates per query (one true item, 19 other catalog items, seeded), "
        "answered with one \\boxed{title} and scored at K = 1 (hit@1)",
    )
    parser.add_argument(
        "--rerec-negatives", type=int, default=NEGATIVES, metavar="N", help="with --rerec: negatives per query"
    )
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=None, help="keep only these tasks (default: all)")
    parser.add_argument("--kg", default=None, help="extra KG triples, JSONL {item_id|title, relation, value}")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    args.domain = args.domain.removesuffix("s")  # the release's folder and the rows' domain: movie, book
    if args.candidates is not None and args.candidates < 1:
        raise RecTuneError(f"--candidates {args.candidates}: give a number of candidates of at least 1")
    if args.candidate_facts and args.candidates is None:
        raise RecTuneError("--candidate-facts shows the candidates' KG facts: give --candidates N too")
    if args.candidate_order != "title" and args.candidates is None:
        raise RecTuneError("--candidate-order orders the candidates: give --candidates N too")
    given = [flag for flag, value in (("--candidates", args.candidates), ("--k", args.k), ("--with-history",
             args.with_history), ("--candidate-facts", args.candidate_facts)) if value]  # fmt: skip
    if args.rerec and given:
        raise RecTuneError(f"--rerec sets its own candidates and K: leave out {', '.join(given)}")
    if args.rerec_negatives < 1:
        raise RecTuneError(f"--rerec-negatives {args.rerec_negatives}: give at least 1")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    out = claim_output(args.out, KIND, overwrite=args.overwrite)  # refused or busy: stop before any work
    release = read_release(args.src, args.domain, history_len=args.history, extra_kg=args.kg)
    rows = [r for r in release.rows if args.tasks is None or r.task in args.tasks]
    if not rows:
        raise RecTuneError(f"no queries of tasks {', '.join(args.tasks)} in {args.src}")
    if args.rerec:  # one positive and 19 negatives per query; queries with no resolved true item are left out
        before = len(rows)
        rows = attach_rerec_candidates(rows, release.catalog, release.independent_kg, args.seed, args.rerec_negatives)
        if not rows:
            raise RecTuneError(f"--rerec: no query in {args.src} has a true item in the catalog")
        if len(rows) < before:
            print(f"--rerec: {before - len(rows)} queries without a true item in the catalog left out")
    ceiling, among = (args.candidates, "candidates") if args.candidates else (len(release.catalog), "catalog items")
    if args.k is not None and args.k > ceiling:  # an answer cannot name more items than it may choose from
        print(f"--k {args.k}: capped at the {ceiling} {among}")
        args.k = ceiling
    train, test = split_rows(rows, args.test_size, args.seed)
    train, valid = split_rows(train, args.valid_size, args.seed + 1)  # by query text, as the test split
    variant = {
        "with_history": args.with_history,
        "k": 1 if args.rerec else args.k,
        "candidates": args.rerec_negatives + 1 if args.rerec else args.candidates,
        "candidate_facts": args.candidate_facts,
        "candidate_order": args.candidate_order if args.candidates else None,
    }
    if args.rerec:
        variant["protocol"] = PROTOCOL
    summary = stats(train, test, release)
    if args.candidates:
        retriever = attach_candidates(
            rows, release.catalog, release.independent_kg, args.candidates, args.candidate_facts, args.candidate_order
        )
        summary["retriever"] = {
            "name": retriever.name,
            "candidates": args.candidates,
            "recall_at_n": {"train": retriever_recall(train + valid), "test": retriever_recall(test)},
        }
    summary["queries"]["valid"] = len(valid)
    summary["prompt"] = variant  # evaluate/run.py reuses these
    with output_set(out, KIND, overwrite=args.overwrite) as staging:
        write_jsonl(staging / "catalog.jsonl", catalog_rows(release.catalog))
        write_jsonl(staging / "kg.jsonl", kg_rows(release.kg))
        for split, part in (("train", train), ("valid", valid), ("test", test)):  # training views derive from these
            write_jsonl(staging / f"{split}.jsonl", (r.to_dict() for r in part))
        write_json(staging / "stats.json", summary)
        write_dataset_card(staging, f"RecBench+ {args.domain}", BENCHMARK.name, out.name)

    sizes = f"{len(train)} train / {len(valid)} validation / {len(test)} test queries"
    print(f"{len(release.catalog)} items, {len(release.kg)} KG triples, {sizes}")
    recall = summary.get("retriever", {}).get("recall_at_n", {}).get("test", {})
    for task, counts in summary["by_task"].items():
        found = f"  retriever recall@{args.candidates} {recall[task]:.3f}" if recall.get(task) is not None else ""
        print(f"  {task:13s} train {counts['train']:6d}  test {counts['test']:6d}{found}")
    if release.missing_files:
        print(f"  missing from the release (see the warnings above): {', '.join(release.missing_files)}")
    unresolved = summary["unresolved_ground_truth"]
    if unresolved["count"]:
        print(f"  {unresolved['count']} ground-truth titles did not resolve to the catalog (listed in stats.json)")
    print(f"wrote {out}/: {build_summary(out)}")


if __name__ == "__main__":
    run(main)
