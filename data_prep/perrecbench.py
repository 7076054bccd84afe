"""Build PerRecBench (grouped user ranking) from a ratings source.

    python data_prep/perrecbench.py --reviews Beauty.jsonl --items meta_Beauty.jsonl --domain beauty \
        --out data/perrec_beauty

--reviews takes Amazon 2023 JSONL, Amazon 2014/2018 JSON (.gz too) or any MovieLens release (a
folder, or its ratings file); --items the matching metadata or movies file (optional: a MovieLens
folder gives its own; else titles fall back to item ids). Writes each group once (its pointwise,
pairwise and listwise rows derive from it on load): train.jsonl, valid.jsonl, test.jsonl, and
stats.json. Recipes name the training views train_sft_F.jsonl / train_rft_F.jsonl for F in
pointwise/pairwise/listwise (a recipe mixes formats by listing several), valid_sft.jsonl,
valid_rft.jsonl: training derives them from the groups (rectune/training/views.py), so no prompt is
stored twice. Groups are split by their shared item, so no item is in both splits. Rows carry the
source's rating scale (MovieLens half stars: 0.5-5) when it is not 1-5. Ratings go through an on-disk
DuckDB store (rectune/data/rating_store.py), so ML-25M or an Amazon 2023 category builds in bounded memory;
--max-groups keeps memory to the sample's.
"""

import argparse
import logging
from pathlib import Path

from tqdm import tqdm

from rectune.benchmarks.perrec import BENCHMARK, groups
from rectune.benchmarks.perrec.rows import LABELS
from rectune.core.cli import (
    ArgumentParser,
    build_summary,
    fraction,
    non_negative,
    non_negative_int,
    positive,
    positive_int,
    run,
)
from rectune.core.io import RecTuneError, write_json, write_jsonl
from rectune.core.outputs import claim_output, output_set
from rectune.data.rating_store import RatingStore
from rectune.data.ratings import add_source_arguments, merged_ids, source_items
from rectune.models.sharing import write_dataset_card

KIND = "perrecbench data"


def parse_args() -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__)
    add_source_arguments(parser, "beauty or movies")
    defaults = groups.GroupSettings()
    parser.add_argument("--window-days", type=positive, default=defaults.window_days, help="co-rating window")
    parser.add_argument(
        "--min-history", type=non_negative_int, default=defaults.min_history, help="other items a user needs"
    )
    parser.add_argument(
        "--min-gap", type=non_negative, default=defaults.min_gap, help="relative ratings differ by more"
    )
    parser.add_argument("--max-group-size", type=int, default=defaults.max_size)
    parser.add_argument("--close-gap", type=non_negative, default=defaults.close_gap, help="difficulty: a near-tie")
    parser.add_argument("--k", type=positive_int, default=defaults.k, help="history items retrieved by BM25")
    parser.add_argument("--no-profile", action="store_true", help="leave the template user profile out")
    parser.add_argument(
        "--any-history", action="store_true",
        help="retrieve history from all the user's other items, also those rated after the shared item",
    )  # fmt: skip
    parser.add_argument(
        "--max-groups", type=positive_int, default=None,
        help="keep a seeded sample of this many groups, stratified by difficulty (stats.json: found and kept)",
    )  # fmt: skip
    parser.add_argument("--test-size", type=fraction, default=0.2, help="fraction of items held out")
    parser.add_argument(
        "--valid-size", type=fraction, default=0.05, help="fraction of the training items held out for validation"
    )
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    out = claim_output(args.out, KIND, overwrite=args.overwrite)  # refused or busy: stop before any work
    settings = groups.GroupSettings(
        args.window_days, args.min_history, args.min_gap, args.max_group_size, args.close_gap, args.k,
        not args.no_profile, not args.any_history,
    )  # fmt: skip
    if not 2 <= settings.max_size <= len(LABELS):
        raise RecTuneError(f"--max-group-size must be between 2 and {len(LABELS)}")
    items = source_items(args.reviews, args.items)
    canonical = merged_ids(items)
    with RatingStore(args.reviews, canonical) as store:  # ratings on disk, grouped out of core
        kept, sampling = groups.sample_groups(store, settings, args.max_groups, args.seed)
        if not kept:
            raise RecTuneError(
                f"no groups in {args.reviews}: no item was rated by two users with >= {settings.min_history} other "
                f"ratings within {settings.window_days:g} days and relative ratings > {settings.min_gap} apart"
            )
        facts = {"merged_duplicate_items": len(canonical)}
        write_benchmark(args, out, store, items, kept, sampling, settings, facts)


def write_benchmark(
    args: argparse.Namespace,
    out: Path,
    store: RatingStore,
    items: dict,
    kept: list,
    sampling: dict | None,
    settings: groups.GroupSettings,
    facts: dict,
) -> None:
    train, test = groups.split_by_item(kept, args.test_size, args.seed)
    train, valid = groups.split_by_item(train, args.valid_size, args.seed + 1)  # items apart from the test's
    rating_scale = store.scale()
    scale = rating_scale.for_rows()
    summary = {"reviews": store.count, **groups.stats(train, test, store, settings)}
    summary.update(facts, moved_ratings=store.moved(), valid_groups=len(valid), sampling=sampling)
    summary["rating_scale"] = rating_scale.as_list()
    # a training prompt never shows a held-out item; validation prompts never show a test item
    held_out = {"train": {g.item for g in [*test, *valid]}, "valid": {g.item for g in test}, "test": set()}
    with output_set(out, KIND, overwrite=args.overwrite) as staging:
        for split, part in (("train", train), ("valid", valid), ("test", test)):  # each group once
            groups.attach_prompts(part, store, items, settings, hidden=held_out[split], scale=scale)
            if split != "valid":  # stats.json breaks down train and test
                summary[split]["members_without_earlier_ratings"] = groups.members_without_earlier_ratings(part)
            records = (groups.group_record(g, items, args.domain, scale).to_dict() for g in part)
            bar = tqdm(records, desc=f"{split} groups", total=len(part), disable=None)
            write_jsonl(staging / f"{split}.jsonl", bar)
            for group in part:
                group.users = []  # written: the next split's blocks take their place
        write_json(staging / "stats.json", summary)
        write_dataset_card(staging, f"PerRecBench {args.domain}", BENCHMARK.name, out.name)

    found, sampled = (sampling["groups"]["found"], f" (a sample of {len(kept)})") if sampling else (len(kept), "")
    print(f"{store.count} ratings, {found} groups{sampled}: {len(train)} train / {len(test)} test")
    for split in ("train", "test"):
        by = summary[split]
        print(f"  {split}: sizes {by['by_size']}, difficulty {by['by_difficulty']}")
    print(f"wrote {out}/: {build_summary(out)}")


if __name__ == "__main__":
    run(main)
