"""Write the embedded demo world: the film KG (demo/films.txt) and a simulated interaction log.

    python data_prep/demo_world.py --out data/demo_world [--users 300] [--seed 0]

Writes items.jsonl, ratings.dat and users.dat, the inputs of data_prep/build_benchmark.py, and
movies.dat (MovieLens-style titles and genres) for data_prep/perrecbench.py, and reviews.json plus
meta.json (Amazon 2018 format, templated review texts) for data_prep/llmrec.py.
"""

from pathlib import Path

from rectune.core.cli import ArgumentParser, add_output_arguments, positive_int, run
from rectune.core.io import atomic_write, write_jsonl
from rectune.core.outputs import claim_output, output_set
from rectune.data.demo_world import load_films, rate, reviews, simulate

KIND = "demo world"


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    add_output_arguments(parser)
    parser.add_argument("--users", type=positive_int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = claim_output(args.out, KIND, overwrite=args.overwrite)  # refused or busy: stop before any work
    items = load_films()
    histories, users = simulate(items, args.users, args.seed)
    ratings = rate(items, histories, users, args.seed)
    with output_set(out, KIND, overwrite=args.overwrite) as staging:
        write_world(staging, items, histories, users, ratings, args.seed)
    print(f"{len(items)} films, {len(users)} users, {sum(map(len, histories.values()))} interactions -> {out}")


def write_world(out: Path, items: list, histories: dict, users: dict, ratings: dict, seed: int) -> None:
    write_jsonl(out / "items.jsonl", ({"id": i.id, "title": i.title, "relations": i.attributes} for i in items))
    with atomic_write(out / "ratings.dat") as handle:
        for user, history in histories.items():
            for step, (item, rating) in enumerate(zip(history, ratings[user], strict=True)):
                handle.write(f"{user}::{item}::{rating}::{978300000 + int(user) * 1000 + step}\n")
    with atomic_write(out / "movies.dat") as handle:
        handle.writelines(f"{i.id}::{i.title}::{'|'.join(i.attributes.get('Genre', []))}\n" for i in items)
    write_jsonl(out / "reviews.json", reviews(items, histories, ratings, seed))
    write_jsonl(
        out / "meta.json", ({"asin": i.id, "title": i.title, "category": i.attributes.get("Genre", [])} for i in items)
    )
    with atomic_write(out / "users.dat") as handle:
        handle.writelines(f"{u}::{p['gender']}::{p['age']}::{p['occupation']}::{p['zip']}\n" for u, p in users.items())


if __name__ == "__main__":
    run(main)
