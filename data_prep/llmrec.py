"""Build LLMRec's five tasks (rating, sequential, direct, explanation, summarisation) from reviews.

    python data_prep/llmrec.py --reviews reviews_Beauty_5.json --items meta_Beauty.json --domain beauty \
        --out data/llmrec_beauty

--reviews takes Amazon 2014/2018 JSON or Amazon 2023 JSONL (.gz too), or any MovieLens release
(a folder, or its ratings file); --items the metadata (titles; without it items are named by id,
and a MovieLens folder gives its own). Ratings-only sources (MovieLens) give the rating,
sequential and direct tasks: explanation and summarisation need review texts and are skipped,
with a warning and a note in stats.json. Users and items are cut to the 5-core, each user's
last review is held out (test.jsonl) and the one before it is the training target. Writes
canonical rows, each once: train.jsonl, valid.jsonl, test.jsonl, plus catalog.jsonl (titles the
ranking answers are matched against) and stats.json. Recipes name the training views
train_sft_T.jsonl / train_rft_T.jsonl for each task T or the mix of all (train_sft_mix.jsonl),
valid_sft.jsonl, valid_rft.jsonl: training derives them from the rows (rectune/training/views.py).
"""

import argparse
import logging
import random
from collections import Counter

from rectune.benchmarks.llmrec import BENCHMARK, build
from rectune.benchmarks.llmrec.rows import TASKS, TEXT_TASKS
from rectune.core.cli import ArgumentParser, build_summary, fraction, positive_int, run
from rectune.core.io import RecTuneError, write_json, write_jsonl
from rectune.core.outputs import claim_output, output_set
from rectune.data.catalog import catalog_rows
from rectune.data.rating_store import RatingStore
from rectune.data.ratings import WHOLE_STARS, add_source_arguments, merged_ids, source_items
from rectune.models.sharing import write_dataset_card

log = logging.getLogger(__name__)

KIND = "llmrec data"


def parse_args() -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__)
    add_source_arguments(parser, "beauty")
    defaults = build.BuildSettings()
    parser.add_argument(
        "--min-interactions", type=positive_int, default=defaults.min_interactions, help="k of the k-core"
    )
    parser.add_argument("--history", type=positive_int, default=defaults.history, help="history items in the prompt")
    parser.add_argument(
        "--num-candidates", type=positive_int, default=defaults.num_candidates, help="direct recommendation"
    )
    parser.add_argument("--sequential-candidates", action="store_true", help="sequential picks from candidates too")
    parser.add_argument(
        "--max-review-words", type=positive_int, default=defaults.max_review_words, help="explanation target"
    )
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument(
        "--max-users", type=positive_int, default=None,
        help="keep a seeded sample of this many users, stratified by activity (stats.json: found and kept)",
    )  # fmt: skip
    parser.add_argument(
        "--valid-size",
        type=fraction,
        default=0.05,
        help="fraction of users whose training rows (second-to-last review) are held out for validation",
    )
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    out = claim_output(args.out, KIND, overwrite=args.overwrite)  # refused or busy: stop before any work
    settings = build.BuildSettings(
        args.min_interactions, args.history, args.num_candidates, args.sequential_candidates, args.max_review_words
    )
    items = source_items(args.reviews, args.items)
    canonical = merged_ids(items)
    with RatingStore(args.reviews, canonical, with_text=True) as store:  # on disk, out of core
        train, test, core, sampling = build.build_rows(store, items, args.domain, settings, args.seed, args.max_users)
        reviews, moved, tied = store.count, store.moved(), store.core_tied_last()
    skipped = {}
    if settings.feedback == "ratings":
        skipped = {t: "the source has ratings only, no review text" for t in TEXT_TASKS if t in args.tasks}
        args.tasks = [t for t in args.tasks if t not in skipped]
        for task, why in skipped.items():
            log.warning("%s skipped: %s", task, why)
    if not args.tasks:
        raise RecTuneError(f"no task left to build from {args.reviews}: {', '.join(skipped)} need review texts")
    if not test:
        raise RecTuneError(f"no user in {args.reviews} is left in the {settings.min_interactions}-core")
    train = [r for r in train if r.task in args.tasks]
    test = [r for r in test if r.task in args.tasks]
    users = sorted({r.user for r in train})
    held_out = set(random.Random(args.seed + 1).sample(users, round(args.valid_size * len(users))))
    valid = [r for r in train if r.user in held_out]
    train = [r for r in train if r.user not in held_out]

    summary = {
        "reviews": reviews,
        "merged_duplicate_items": len(canonical),
        "moved_ratings": moved,
        "core": {key: core[key] for key in ("reviews", "users", "items")},
        "settings": vars(settings),
        "train": dict(Counter(r.task for r in train)),
        "valid": dict(Counter(r.task for r in valid)),
        "test": dict(Counter(r.task for r in test)),
        "skipped_tasks": skipped,
        "sampling": sampling,
        "rating_scale": settings.scale or WHOLE_STARS.as_list(),
        # users whose last two ratings share a second: the later by numeric item id is their test target
        "tied_test_targets": tied,
    }
    with output_set(out, KIND, overwrite=args.overwrite) as staging:
        write_jsonl(staging / "catalog.jsonl", catalog_rows(build.catalog(core["item_ids"], items)))
        for split, rows in (("train", train), ("valid", valid), ("test", test)):  # training views derive from these
            write_jsonl(staging / f"{split}.jsonl", (r.to_dict() for r in rows))
        write_json(staging / "stats.json", summary)
        write_dataset_card(staging, f"LLMRec {args.domain}", BENCHMARK.name, out.name)
    core = summary["core"]
    print(f"{reviews} reviews -> {settings.min_interactions}-core: {core['users']} users, {core['items']} items")
    for task in args.tasks:
        print(f"  {task:14s} train {summary['train'].get(task, 0):6d}  test {summary['test'].get(task, 0):6d}")
    print(f"wrote {out}/: {build_summary(out)}")


if __name__ == "__main__":
    run(main)
