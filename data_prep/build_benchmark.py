"""Build a RecBench+-style benchmark from an item KG and an interaction log.

    python data_prep/build_benchmark.py --kg items.jsonl --ratings ratings.dat --users users.dat --out ROOT
    python data_prep/recbench.py --src ROOT --domain movie --kg ROOT/kg.jsonl --out DIR

The KG holds one item per line: {"id", "title", "relations": {relation: [values]}}. ratings.dat and
users.dat are MovieLens-style (user::item::rating::timestamp, user::gender::age::occupation::zip).
ROOT gets the RecBench+ release layout (data/movie/*Query.json, movies.dat, ratings.dat, users.dat)
plus kg.jsonl with every triple, for CMR. --rewrite-model rephrases condition queries with a local
chat model (names and titles must survive, else the template text stays).
"""

import argparse
import json
import logging
from pathlib import Path

from rectune.benchmarks.recbench.builder import BenchmarkBuilder, BuildSettings, load_items
from rectune.benchmarks.recbench.release import load_ratings
from rectune.cli import add_output_arguments, run
from rectune.io import DataError, atomic_write, output_set, read_text, write_jsonl
from rectune.ratings import read_users

QUERY_FILES = {"explicit": "ExplicitQuery", "implicit": "ImplicitQuery", "misinformed": "MisinformedQuery"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kg", required=True, help="items with relations (JSONL)")
    parser.add_argument("--ratings", required=True, help="ratings.dat: user::item::rating::timestamp")
    parser.add_argument("--users", required=True, help="users.dat: user::gender::age::occupation::zip")
    add_output_arguments(parser, "release root to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--queries-per-user", type=int, default=2)
    parser.add_argument("--max-ground-truth", type=int, default=12)
    parser.add_argument("--rewrite-model", default=None, help="local chat model to rephrase queries (optional)")
    return parser.parse_args()


def make_rewriter(model_name: str):
    """Rephrase with a local chat model, greedily; returns the first line of its answer."""
    from rectune.checkpoints import load_for_generation, resolve_checkpoint
    from rectune.generation import GenerationSettings, generate

    model, tokenizer = load_for_generation(resolve_checkpoint(model_name))
    settings = GenerationSettings(batch_size=1, max_new_tokens=60)

    def rewrite(text: str) -> str:
        prompt = [
            {
                "role": "user",
                "content": f"Rewrite this movie request in casual words. Keep every name and "
                f"title exactly. Answer with the request only.\n\n{text}",
            }
        ]
        (batch,) = generate(model, tokenizer, [prompt], settings, desc="rewriting")
        return batch[0][1].strip().splitlines()[0] if batch[0][1].strip() else ""

    return rewrite


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    items = load_items(args.kg)
    known = {item.id for item in items}
    ratings = load_ratings(Path(args.ratings))
    histories = {}
    for user, events in ratings.items():
        unknown = [i for _, i in events if i not in known]
        if unknown:
            raise DataError(args.ratings, f"user {user}: item {unknown[0]!r} is not in the KG {args.kg}")
        histories[user] = [i for _, i in events]
    users = read_users(Path(args.users))
    rewrite = make_rewriter(args.rewrite_model) if args.rewrite_model else None
    settings = BuildSettings(
        seed=args.seed, queries_per_user=args.queries_per_user, max_ground_truth=args.max_ground_truth
    )
    builder = BenchmarkBuilder(items, settings, rewrite)
    records = builder.condition_queries(histories)
    records["interest"] = builder.interest_queries(histories)
    records["demographics"] = builder.demographics_queries(histories, users)

    names = {**QUERY_FILES, "interest": "InterestBasedQuery", "demographics": "UserBasedQuery"}
    with output_set(args.out, "recbench+ release", overwrite=args.overwrite, writes=("data", "kg.jsonl")) as root:
        folder = root / "data" / "movie"
        for task, name in names.items():
            with atomic_write(folder / f"{name}.json") as handle:
                json.dump(records[task], handle, ensure_ascii=False, indent=1)
        with atomic_write(folder / "movies.dat") as handle:
            handle.writelines(f"{i.id}::{i.title}::{'|'.join(i.attributes.get('Genre', []))}\n" for i in items)
        with atomic_write(folder / "ratings.dat") as handle:
            handle.write(read_text(args.ratings))
        with atomic_write(folder / "users.dat") as handle:
            handle.write(read_text(args.users))
        triples = (
            {"item_id": i.id, "relation": r, "value": v} for i in items for r, vs in i.attributes.items() for v in vs
        )
        write_jsonl(root / "kg.jsonl", triples)
    folder = Path(args.out) / "data" / "movie"
    counts = ", ".join(f"{task} {len(recs)}" for task, recs in records.items())
    print(f"{len(items)} items, {len(histories)} users -> {counts} records in {folder}")


if __name__ == "__main__":
    run(main)
