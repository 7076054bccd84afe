"""Synthetic RecBench+-sized data for the benchmarks (deterministic for a seed)."""

import json
import random
from pathlib import Path

WORDS = (
    "night day city river shadow star love war king queen dark light last first lost secret blue red iron silent "
    "golden broken wild little big dead living ghost dream road house hunter storm winter summer fire ice stone heart "
    "moon sun sea island mountain garden empire return rise fall game"
).split()
ARTICLES = ["", "", "", "The ", "A "]
RELATIONS = ["Director", "Starring", "Genre", "Composer", "Cinematography"]


def make_titles(n: int, rng: random.Random) -> list[str]:
    """``n`` distinct MovieLens-style titles (``Title, The (1995)``)."""
    titles, seen = [], set()
    while len(titles) < n:
        words = " ".join(rng.choice(WORDS).capitalize() for _ in range(rng.randint(1, 4)))
        article = rng.choice(ARTICLES)
        name = f"{words}, {article.strip()}" if article else words
        title = f"{name} ({rng.randint(1930, 2020)})"
        key = (words, article)
        if key not in seen:
            seen.add(key)
            titles.append(title)
    return titles


def variant(title: str, rng: random.Random) -> str:
    """How a model might write a catalog title: natural article order, case, no year, a typo."""
    main, _, year = title.rpartition(" (")
    if main.endswith((", The", ", A")):
        head, _, article = main.rpartition(", ")
        main = f"{article} {head}"
    choice = rng.random()
    if choice < 0.3:
        return main
    if choice < 0.5:
        return main.lower() + f" ({year}"
    if choice < 0.6 and len(main) > 6:
        i = rng.randrange(1, len(main) - 1)
        return main[:i] + main[i + 1 :]  # a dropped letter: exercises the fuzzy fallback
    return f"{main} ({year}"


def write_release(root: Path, n_items: int, n_queries: int, n_ratings: int, seed: int = 0) -> list[str]:
    """A RecBench+-layout movie release; returns the catalog titles."""
    rng = random.Random(seed)
    folder = root / "data" / "movie"
    folder.mkdir(parents=True, exist_ok=True)
    titles = make_titles(n_items, rng)
    with open(folder / "movies.dat", "w", encoding="latin-1") as f:
        for i, t in enumerate(titles, start=1):
            f.write(f"{i}::{t}::Drama|Thriller\n")
    n_users = max(1, n_ratings // 20)
    with open(folder / "ratings.dat", "w", encoding="utf-8") as f:
        for r in range(n_ratings):
            f.write(f"{rng.randint(1, n_users)}::{rng.randint(1, n_items)}::4::{r}\n")
    shares = {"ExplicitQuery": 0.15, "ImplicitQuery": 0.11, "MisinformedQuery": 0.09}
    made = 0
    for name, share in shares.items():
        records = []
        for i in range(int(n_queries * share)):
            ids = rng.sample(range(1, n_items + 1), rng.randint(1, 5))
            conds = [[rng.choice(RELATIONS), f"Person {rng.randint(1, 2000)}"] for _ in range(rng.randint(1, 4))]
            record = {
                "data_idx": i,
                "source_user": str(rng.randint(1, n_users)),
                "condition_num": len(conds),
                "movieSubset": [titles[j - 1] for j in ids],
                "movieSubsetId": ids,
                "sharedRelationships": conds,
                "situational_description_query": f"{name} query {i} about {conds[0][1]}",
            }
            if name == "MisinformedQuery":
                record["query"] = record.pop("situational_description_query")
                record["misinformed"] = [
                    {
                        "movie": titles[ids[0] - 1],
                        "relation": conds[0][0],
                        "person": "Someone Else",
                        "original person": conds[0][1],
                    }
                ]
            records.append(record)
        made += len(records)
        (folder / f"{name}.json").write_text(json.dumps(records))
    interest = []
    while made < n_queries:
        entries = [
            {
                "reason": "r",
                "query": f"interest query {made + j}",
                "movie subset": [rng.choice(titles) for _ in range(rng.randint(2, 10))],
            }
            for j in range(4)
        ]
        interest.append({"source_users": ["1"], "query & ground true": entries})
        made += len(entries)
    (folder / "InterestBasedQuery.json").write_text(json.dumps(interest))
    return titles
