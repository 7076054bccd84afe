"""Build a RecBench+-style benchmark from an item KG and an interaction log, or from a MovieLens release.

    python data_prep/build_benchmark.py --kg items.jsonl --ratings ratings.dat --users users.dat --out ROOT
    python data_prep/build_benchmark.py --movielens ml-latest-small --out ROOT
    python data_prep/recbench.py --src ROOT --domain movies --kg ROOT/kg.jsonl --out DIR

--movielens takes any MovieLens release folder as distributed (ml-100k, ML-1M/10M, ml-latest,
20M/25M/32M) and builds the KG from its own metadata: Genre, Year and, where the release has
tags, Tag. Condition queries need an *anchor* relation among their conditions
(--anchor-relations; default Director Starring Composer for a KG, Year Tag for MovieLens); a build
whose KG has none stops before searching. Equal timestamps are ordered by numeric item id;
interest pairs use strictly ordered events only (--allow-tied-pairs to use tied ones too).

The KG holds one item per line: {"id", "title", "relations": {relation: [values]}}. ratings.dat and
users.dat are MovieLens-style (user::item::rating::timestamp, user::gender::age::occupation::zip).
ROOT gets the current RecBench+ release layout (dataset/movie/*Query.json with data_idx ids,
DemographicsBasedQuery.json, movies.dat, ratings.dat, users.dat)
plus kg.jsonl with every triple, for CMR. --rewrite-model rephrases condition queries with a local
chat model (names and titles must survive, else the template text stays).
"""

import argparse
import json
import logging
from pathlib import Path

from rectune.benchmarks.recbench.builder import PERSON_RELATIONS, BenchmarkBuilder, BuildSettings, load_items
from rectune.benchmarks.recbench.records import QUERY_FILES
from rectune.core.cli import (
    ArgumentParser,
    add_output_arguments,
    build_summary,
    non_negative_int,
    positive,
    positive_int,
    run,
)
from rectune.core.io import DataError, RecTuneError, atomic_write, write_json, write_jsonl
from rectune.core.outputs import claim_output, output_set
from rectune.data import movielens
from rectune.data.rating_store import RatingStore
from rectune.data.ratings import Review, read_reviews, read_users
from rectune.data.sampling import sample_users

log = logging.getLogger(__name__)

KIND = "recbench+ release"


def parse_args() -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kg", help="items with relations (JSONL); needs --ratings and --users")
    source.add_argument("--movielens", help="a MovieLens release folder (its KG comes from its metadata)")
    parser.add_argument("--ratings", help="ratings.dat: user::item::rating::timestamp (with --kg)")
    parser.add_argument("--users", help="users.dat: user::gender::age::occupation::zip (with --kg)")
    add_output_arguments(parser, "release root to write")
    parser.add_argument("--anchor-relations", nargs="+", default=None, help="relations a condition query must use")
    parser.add_argument("--allow-tied-pairs", action="store_true", help="interest pairs from same-second events too")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--queries-per-user", type=positive_int, default=2)
    parser.add_argument(
        "--max-users", type=positive_int, default=None,
        help="build from a seeded sample of this many users, stratified by activity (stats.json: found and kept)",
    )  # fmt: skip
    parser.add_argument("--max-ground-truth", type=positive_int, default=12)
    parser.add_argument(
        "--rewrite-model", default=None, help="chat model to rephrase queries (optional): a checkpoint, or with "
        "--base-url the model an OpenAI-compatible endpoint serves (the paper phrased its queries with GPT-4o)",
    )  # fmt: skip
    parser.add_argument("--base-url", default=None, help="--rewrite-model is served here (an OpenAI-compatible /v1)")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding its key")
    parser.add_argument("--request-timeout", type=positive, default=300.0, help="seconds per request attempt")
    parser.add_argument(
        "--max-retries", type=non_negative_int, default=5, help="retries on 429/5xx/timeouts (with backoff)"
    )
    return parser.parse_args()


def make_rewriter(args: argparse.Namespace):
    """Rephrase with a chat model (local, or served at --base-url), greedily; returns the first line of its answer."""
    from rectune.models.generation import GenerationSettings, generate

    settings = GenerationSettings(batch_size=1, max_new_tokens=60)
    if args.base_url:
        from rectune.evaluation.endpoint import Endpoint, ask_one

        endpoint = Endpoint(
            args.base_url, args.rewrite_model, args.api_key_env, 1, args.request_timeout, args.max_retries
        )

        def answer(prompt: list[dict]) -> str:
            text, record = ask_one(endpoint, prompt, settings)
            return "" if "error" in record else text  # a refused request keeps the template text
    else:
        from rectune.models.checkpoints import load_for_generation, resolve_checkpoint

        model, tokenizer = load_for_generation(resolve_checkpoint(args.rewrite_model))

        def answer(prompt: list[dict]) -> str:
            (batch,) = generate(model, tokenizer, [prompt], settings, desc="rewriting")
            return batch[0][1]

    def rewrite(text: str) -> str:
        prompt = [
            {
                "role": "user",
                "content": f"Rewrite this movie request in casual words. Keep every name and "
                f"title exactly. Answer with the request only.\n\n{text}",
            }
        ]
        answered = answer(prompt).strip()
        return answered.splitlines()[0] if answered else ""

    return rewrite


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    out = claim_output(args.out, KIND, overwrite=args.overwrite)  # refused or busy: stop before any work
    if args.movielens:  # sampled in the rating store: only the sampled users' ratings are read out
        items, histories, times, info, users = movielens_source(Path(args.movielens), args.max_users, args.seed)
        anchors = tuple(args.anchor_relations or MOVIELENS_ANCHORS)
    else:
        if not (args.ratings and args.users):
            raise RecTuneError("--kg needs --ratings and --users")
        items, histories, times, info, users = kg_source(args)
        anchors = tuple(args.anchor_relations or PERSON_RELATIONS)
        activity = {u: len(h) for u, h in histories.items()}
        kept, info["sampling"] = sample_users(list(histories), activity, args.max_users, args.seed)
        if info["sampling"]:
            histories, times = {u: histories[u] for u in kept}, {u: times[u] for u in kept}
            info["ratings"] = {u: info["ratings"][u] for u in kept}
    if info["sampling"]:  # the release written holds the sampled users only; "users" in stats.json counts all
        users = {u: profile for u, profile in users.items() if u in histories}
    rewrite = make_rewriter(args) if args.rewrite_model else None
    settings = BuildSettings(
        seed=args.seed, queries_per_user=args.queries_per_user, max_ground_truth=args.max_ground_truth,
        anchor_relations=anchors, allow_tied_pairs=args.allow_tied_pairs,
    )  # fmt: skip
    builder = BenchmarkBuilder(items, settings, rewrite)
    builder.check_anchors()
    records = builder.condition_queries(histories, progress=True)
    if not any(records.values()):
        raise RecTuneError(
            f"no condition query: no user has two items sharing a condition set with an anchor relation "
            f"({', '.join(anchors)}) and at most {args.max_ground_truth} matching items (try --max-ground-truth "
            "or --anchor-relations)"
        )
    records["interest"] = builder.interest_queries(histories, times)
    records["demographics"] = builder.demographics_queries(histories, users) if users else []
    if not users:
        log.warning("no user file: no demographics-based queries")
    info["anchor_relations"] = list(anchors)
    info["queries"] = {task: len(recs) for task, recs in records.items()}
    info["condition_queries"] = builder.explain_counts(records)

    with output_set(out, KIND, overwrite=args.overwrite) as root:
        folder = root / "dataset" / "movie"
        for task, (name, *_) in QUERY_FILES.items():  # the current release's names
            with atomic_write(folder / name) as handle:
                json.dump(records[task], handle, ensure_ascii=False, indent=1)
        with atomic_write(folder / "movies.dat") as handle:
            handle.writelines(f"{i.id}::{i.title}::{'|'.join(i.attributes.get('Genre', []))}\n" for i in items)
        with atomic_write(folder / "ratings.dat") as handle:
            for user, events in histories.items():
                handle.writelines(f"{user}::{item}::{info['ratings'][user][n]}::{times[user][n]}\n"
                                  for n, item in enumerate(events))  # fmt: skip
        with atomic_write(folder / "users.dat") as handle:
            handle.writelines(f"{u}::{p['gender']}::{p['age']}::{p['occupation']}::\n" for u, p in users.items())
        triples = (
            {"item_id": i.id, "relation": r, "value": v} for i in items for r, vs in i.attributes.items() for v in vs
        )
        write_jsonl(root / "kg.jsonl", triples)
        info.pop("ratings")
        write_json(root / "stats.json", info)
    folder = Path(args.out) / "dataset" / "movie"
    counts = ", ".join(f"{task} {len(recs)}" for task, recs in records.items())
    print(f"{len(items)} items, {len(histories)} users -> {counts} records in {folder}")
    print(f"wrote {args.out}/: {build_summary(args.out)}")


MOVIELENS_ANCHORS = ("Year", "Tag")


def kg_source(args: argparse.Namespace) -> tuple:
    """Items of the KG file, the users' histories (by time) and demographics."""
    items = load_items(args.kg)
    known = {item.id for item in items}
    reviews = read_reviews(args.ratings)
    unknown = next((r for r in reviews if r.item not in known), None)
    if unknown is not None:
        raise DataError(args.ratings, f"user {unknown.user}: item {unknown.item!r} is not in the KG {args.kg}")
    return (items, *_histories(reviews), read_users(args.users))


def movielens_source(folder: Path, max_users: int | None, seed: int) -> tuple:
    """A MovieLens release: its KG (genres, year, tags), the (sampled) users' histories by time, and users
    where it has them. The ratings go through the on-disk rating store, so a sample of ML-25M's users
    costs the sample's memory."""
    if not folder.is_dir():
        raise DataError(folder, "--movielens needs the release folder (holding the ratings and movies files)")
    movies = movielens.read_movies(movielens.release_folder_file(folder, "items"))
    tags_file = movielens.release_file(folder, "tags")
    items = movielens.kg_items(movies, movielens.read_tags(tags_file) if tags_file else {})
    canonical = movielens.canonical_ids(movies)
    with RatingStore(folder, canonical) as store:
        unknown = store.unknown_item(movies)
        if unknown is not None:
            raise DataError(folder, f"user {unknown[0]}: rated item {unknown[1]!r}, which the movies file lacks")
        counts = store.user_counts()
        kept, sampling = sample_users(list(counts), counts, max_users, seed)  # counts: by first appearance
        by_user = store.first_ratings(kept)
        histories, times, info = _histories([r for user in kept for r in by_user.pop(user)])
        # the facts of every user, sampled or not
        info.update(users=len(counts), tied_events=store.user_facts(0)["tied_ratings"])
        info.update(merged_duplicate_items=len(canonical), moved_ratings=store.moved())  # films listed twice
    info["tagged_items"] = sum(1 for i in items if "Tag" in i.attributes)
    info["sampling"] = sampling
    users_file = movielens.release_file(folder, "users")
    return items, histories, times, info, movielens.read_users(users_file) if users_file else {}


def _histories(reviews: list[Review]) -> tuple[dict, dict, dict]:
    """Each user's items and timestamps by time (ties: numeric item id), and the build's facts."""
    by_user: dict[str, list[Review]] = {}
    for review in reviews:
        by_user.setdefault(review.user, []).append(review)
    histories, times, ratings = {}, {}, {}
    for user, events in by_user.items():
        events = movielens.chronological(events)
        histories[user] = [r.item for r in events]
        times[user] = [r.timestamp for r in events]
        ratings[user] = [f"{r.rating:g}" for r in events]
    info = {
        "users": len(histories),
        "ratings": ratings,
        # events sharing their second with another of the same user's: ordered by numeric item id
        "tied_events": sum(movielens.tied_events(stamps, timestamp=lambda t: t) for stamps in times.values()),
    }
    return histories, times, info


if __name__ == "__main__":
    run(main)
