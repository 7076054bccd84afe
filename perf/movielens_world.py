"""Synthetic MovieLens releases written in each public layout (ml-100k, ML-1M, ML-10M, ml-latest).

Tests write a few users in each layout; ``perf/bench_movielens.py`` writes ml-100k-sized and
ml-latest-small-sized ones. The layouts follow the releases' README files: ml-100k ``u.data`` (TSV),
``u.item`` (pipe-separated, Latin-1, 19 genre flags), ``u.genre``, ``u.user``; ML-1M/10M ``::``
``.dat`` files (ML-1M users with age-band and occupation codes; ML-10M ``tags.dat``, half stars);
ml-latest ``ratings.csv``, ``movies.csv`` (quoted titles), ``tags.csv`` with headers.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass, field
from pathlib import Path

from rectune.data.movielens import AGE_BANDS, GENRES_100K, OCCUPATIONS

LAYOUTS = ("ml-100k", "ml-1m", "ml-10m", "ml-latest")


@dataclass
class World:
    movies: list[tuple[str, str, list[str]]]  # id, title with year, genres
    ratings: list[tuple[str, str, float, int]]  # user, item, rating, timestamp (seconds)
    users: dict[str, tuple[str, int, str]] = field(default_factory=dict)  # user -> gender, age, occupation name
    tags: list[tuple[str, str, str, int]] = field(default_factory=list)  # user, item, tag, timestamp


def write(folder: Path, layout: str, world: World) -> Path:
    """Write ``world`` as the release ``layout`` into ``folder`` (created); returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    if layout == "ml-100k":
        _write_100k(folder, world)
    elif layout in ("ml-1m", "ml-10m"):
        with open(folder / "ratings.dat", "w", encoding="utf-8") as handle:
            handle.writelines(f"{u}::{i}::{r:g}::{t}\n" for u, i, r, t in world.ratings)
        with open(folder / "movies.dat", "w", encoding="latin-1") as handle:  # ML-1M's movies.dat is Latin-1
            handle.writelines(f"{i}::{title}::{'|'.join(g) or '(no genres listed)'}\n" for i, title, g in world.movies)
        if layout == "ml-1m":
            codes = {name: code for code, name in OCCUPATIONS.items()}
            with open(folder / "users.dat", "w", encoding="utf-8") as handle:
                for user, (gender, age, occupation) in world.users.items():
                    handle.write(f"{user}::{gender}::{_age_code(age)}::{codes[occupation]}::12345\n")
        else:
            with open(folder / "tags.dat", "w", encoding="utf-8") as handle:
                handle.writelines(f"{u}::{i}::{tag}::{t}\n" for u, i, tag, t in world.tags)
    elif layout == "ml-latest":
        _csv(folder / "ratings.csv", ["userId", "movieId", "rating", "timestamp"],
             ([u, i, f"{r:.1f}", t] for u, i, r, t in world.ratings))  # fmt: skip
        _csv(folder / "movies.csv", ["movieId", "title", "genres"],
             ([i, title, "|".join(g) or "(no genres listed)"] for i, title, g in world.movies))  # fmt: skip
        _csv(folder / "tags.csv", ["userId", "movieId", "tag", "timestamp"], world.tags)
    else:
        raise ValueError(f"unknown layout {layout!r}; choose from {LAYOUTS}")
    return folder


def _write_100k(folder: Path, world: World) -> None:
    with open(folder / "u.data", "w", encoding="ascii") as handle:
        handle.writelines(f"{u}\t{i}\t{int(r)}\t{t}\n" for u, i, r, t in world.ratings)
    with open(folder / "u.genre", "w", encoding="ascii") as handle:
        handle.writelines(f"{name}|{index}\n" for index, name in enumerate(GENRES_100K))
        handle.write("\n")  # the release ends u.genre with a blank line
    with open(folder / "u.item", "w", encoding="latin-1") as handle:
        for item, title, genres in world.movies:
            flags = "|".join(
                "1" if name in genres or (name == "unknown" and not genres) else "0" for name in GENRES_100K
            )
            handle.write(f"{item}|{title}|01-Jan-1995||http://us.imdb.com/M/title-exact?x|{flags}\n")
    with open(folder / "u.user", "w", encoding="ascii") as handle:
        handle.writelines(f"{u}|{age}|{gender}|{occ}|55105\n" for u, (gender, age, occ) in world.users.items())


def _csv(path: Path, header: list[str], rows) -> None:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def _age_code(age: int) -> str:
    return max((code for code in AGE_BANDS if int(code) <= age), key=int)


# titles in the releases' spelling: "Harbor, The (1995)", alternate titles in parentheses
ADJECTIVES = ("Silent", "Crimson", "Last", "Broken", "Golden", "Hidden", "Wild", "Midnight", "Lonely", "Frozen",
              "Burning", "Distant", "Secret", "Endless", "Hollow", "Bright", "Falling", "Restless", "Savage", "Quiet",
              "Iron", "Velvet", "Electric", "Forgotten", "Northern", "Bitter", "Sweet", "Dark", "Lucky",
              "Little")  # fmt: skip
NOUNS = ("Harbor", "Garden", "Empire", "Letter", "Mirror", "Station", "Kingdom", "River", "Summer", "Promise",
         "Horizon", "Stranger", "Island", "Journey", "Witness", "Carnival", "Frontier", "Orchard", "Circus", "Lantern",
         "Voyage", "Tide", "Season", "Border", "Canyon", "Ballad", "Heist", "Signal", "Shadow", "Bridge",
         "Passage", "Window", "Dream", "Country", "Highway", "Harvest", "Winter", "Thief", "Song",
         "Affair")  # fmt: skip
ALTERNATES = ("Cité des enfants perdus, La", "Yao a yao yao dao waipo qiao", "Boot, Das", "Ladri di biciclette",
              "Jules et Jim", "Ying xiong", "Fabuleux destin d'Amélie Poulain, Le", "Lola rennt")  # fmt: skip


def catalog_title(index: int, year: int) -> str:
    """The ``index``-th (from 0) distinct title, spelled as MovieLens spells titles: trailing articles
    (``Harbor, The``), now and then an alternate title in parentheses, then the year."""
    base = f"{ADJECTIVES[index % len(ADJECTIVES)]} {NOUNS[index // len(ADJECTIVES) % len(NOUNS)]}"
    if index >= len(ADJECTIVES) * len(NOUNS):
        base += f" {index // (len(ADJECTIVES) * len(NOUNS)) + 1}"  # sequels keep every title distinct
    form = index % 10
    if form in (0, 3):
        base = f"{base}, The"
    elif form == 5:
        base = f"{base}, A"
    elif form == 7:
        base = f"{base} ({ALTERNATES[index // 10 % len(ALTERNATES)]})"
    return f"{base} ({year})"


TAGS = ("atmospheric", "twist ending", "dark comedy", "based on a book", "visually appealing", "quirky",
        "thought-provoking", "classic", "funny", "space", "time travel", "heist", "cult film", "slow")  # fmt: skip


def synthetic(
    n_users: int, n_items: int, n_ratings: int, *, half_stars: bool = False, tagged: float = 0.0, seed: int = 0
) -> World:
    """A world with genre tastes (users rate their genres more and higher), years 1930-2018, titles in
    the releases' spelling, every 400th film listed again under a second id (as ml-100k lists 18), and
    ratings in bursts as in real MovieLens logs: sessions of many ratings seconds apart (one in ten in
    the same second as the one before), a new session days or weeks later now and then, users starting
    within about seven months (ml-100k's span)."""
    rng = random.Random(seed)
    genres = [g for g in GENRES_100K if g != "unknown"]
    movies = []
    for index in range(1, n_items + 1):
        title = catalog_title(len(movies), rng.randint(1930, 2018)) if index % 400 else movies[index - 2][1]
        movies.append((str(index), title, rng.sample(genres, rng.randint(1, 3))))
    by_genre: dict[str, list[int]] = {g: [] for g in genres}
    for position, (_, _, movie_genres) in enumerate(movies):
        for genre in movie_genres:
            by_genre[genre].append(position)
    occupations = sorted(set(OCCUPATIONS.values()))
    users = {str(u): (rng.choice("MF"), rng.randint(12, 70), rng.choice(occupations)) for u in range(1, n_users + 1)}
    ratings, per_user = [], max(n_ratings // n_users, 2)
    for user in users:
        taste = rng.sample(genres, 3)
        chosen: set[int] = set()
        while len(chosen) < min(per_user, n_items):
            pool = by_genre[rng.choice(taste)] if rng.random() < 0.7 else range(n_items)
            chosen.add(rng.choice(pool))
        clock = 875_000_000 + rng.randint(0, 200 * 86400)
        for n, position in enumerate(sorted(chosen, key=lambda _: rng.random())):
            item, _, movie_genres = movies[position]
            liked = len(set(movie_genres) & set(taste))
            stars = min(5.0, max(0.5 if half_stars else 1.0, rng.gauss(2.8 + 0.7 * liked, 1.0)))
            stars = round(stars * 2) / 2 if half_stars else float(round(stars))
            if n and rng.random() < 0.05:
                clock += rng.randint(1, 40) * 86400  # a new session, days to weeks later
            else:
                clock += 0 if rng.random() < 0.1 else rng.randint(5, 180)  # same session; 10 %: the same second
            ratings.append((user, item, stars, clock))
    tags = [
        (str(rng.randint(1, n_users)), item, rng.choice(TAGS), 1_500_000_000 + n)
        for n, (item, _, _) in enumerate(movies)
        for _ in range(rng.randint(1, 3) if rng.random() < tagged else 0)
    ]
    return World(movies, ratings, users, tags)


def write_bursty_csv(folder: Path, n_users: int, n_items: int, n_ratings: int, seed: int = 0) -> Path:
    """An ml-latest-layout release (``ratings.csv`` sorted by user then movie, half stars; ``movies.csv``)
    of about ``n_ratings`` ratings, generated with numpy in blocks of users so that ML-25M's 25 million
    fit in memory: every user has at least 20 ratings and activity is heavy-tailed (ML-25M: median 71,
    mean 154), films are rated by popularity (a few thousand hold most ratings), and ratings come in
    bursts as in :func:`synthetic` (seconds apart, one in ten in the same second, a new session days or
    weeks later one time in twenty)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    genres = [g for g in GENRES_100K if g != "unknown"]
    titles = []
    with open(folder / "movies.csv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["movieId", "title", "genres"])
        for index in range(1, n_items + 1):
            title = catalog_title(len(titles), int(rng.integers(1930, 2019))) if index % 400 else titles[-1]
            titles.append(title)
            picked = rng.choice(len(genres), size=int(rng.integers(1, 4)), replace=False)
            writer.writerow([index, title, "|".join(genres[g] for g in sorted(picked))])
    counts = np.maximum(20, rng.lognormal(4.3, 1.0, n_users)).astype(np.int64)
    # a tenth more drawn than asked for: draws of a film the user already rated are dropped
    counts = np.minimum(np.maximum(20, counts * n_ratings * 11 // (10 * counts.sum())), n_items // 2)
    quality = rng.normal(0.0, 0.6, n_items)
    with open(folder / "ratings.csv", "w", encoding="ascii") as handle:
        handle.write("userId,movieId,rating,timestamp\n")
        for first in range(0, n_users, 5000):
            block = counts[first : first + 5000]
            users = np.repeat(np.arange(first + 1, first + 1 + len(block)), block)
            items = (n_items * rng.random(len(users)) ** 2.5).astype(np.int64)  # popular films first
            keys = np.unique(users * (n_items + 1) + items)  # one rating per user and film, by user then film
            users, items = keys // (n_items + 1), keys % (n_items + 1)
            gaps = np.where(rng.random(len(users)) < 0.1, 0, rng.integers(5, 181, len(users)))
            gaps = np.where(rng.random(len(users)) < 0.05, rng.integers(1, 41, len(users)) * 86400, gaps)
            order = rng.permutation(len(users))  # the order the user rated in, unrelated to film ids
            order = order[np.argsort(users[order], kind="stable")]
            clock = np.cumsum(gaps[order])
            starts = np.searchsorted(users[order], users[order])  # each row's user's first position
            clock = clock - clock[starts] + 1_100_000_000 + (users[order] * 7919 % (300 * 86400))
            times = np.empty_like(clock)
            times[order] = clock
            bias = rng.normal(0.0, 0.5, len(block) + 1)[users - first]
            stars = np.clip(np.round((3.5 + bias + quality[items] + rng.normal(0, 0.9, len(users))) * 2) / 2, 0.5, 5)
            rows = zip(users.tolist(), (items + 1).tolist(), stars.tolist(), times.tolist(), strict=True)
            handle.writelines(f"{u},{i},{s:.1f},{t}\n" for u, i, s, t in rows)
    return folder
