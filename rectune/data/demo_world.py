"""The embedded demo world: a KG of well-known films and a simulated interaction log.

``demo/films.txt`` lists each film as ``title (year) | directors | leading cast | genres |
composer`` (facts as commonly credited; composer left blank where we are not sure). The log is
simulated: users get demographics (MovieLens codes), tastes that depend on them (genres) plus a
few favourite directors and actors, and watch films drawn by those tastes; a film that starts a
series is followed right away by its sequels, which is what interest-based queries pick up.
Everything is seeded, so the world is the same on every machine.
"""

from __future__ import annotations

import random
from pathlib import Path

from rectune.core.io import DataError
from rectune.data.titles import CatalogItem

FILMS = Path(__file__).resolve().parents[2] / "demo" / "films.txt"
RELATIONS = ("Director", "Starring", "Genre", "Composer")
SERIES = (
    ("Star Wars (1977)", "The Empire Strikes Back (1980)", "Return of the Jedi (1983)"),
    (
        "The Lord of the Rings: The Fellowship of the Ring (2001)",
        "The Lord of the Rings: The Two Towers (2002)",
        "The Lord of the Rings: The Return of the King (2003)",
    ),
    ("The Godfather (1972)", "The Godfather Part II (1974)"),
    ("Back to the Future (1985)", "Back to the Future Part II (1989)"),
    ("Toy Story (1995)", "Toy Story 2 (1999)"),
    (
        "Harry Potter and the Sorcerer's Stone (2001)",
        "Harry Potter and the Chamber of Secrets (2002)",
        "Harry Potter and the Prisoner of Azkaban (2004)",
    ),
    ("Kill Bill: Vol. 1 (2003)", "Kill Bill: Vol. 2 (2004)"),
    ("Batman Begins (2005)", "The Dark Knight (2008)", "The Dark Knight Rises (2012)"),
    ("The Terminator (1984)", "Terminator 2: Judgment Day (1991)"),
    ("Alien (1979)", "Aliens (1986)"),
    (
        "Raiders of the Lost Ark (1981)",
        "Indiana Jones and the Temple of Doom (1984)",
        "Indiana Jones and the Last Crusade (1989)",
    ),
    ("A Fistful of Dollars (1964)", "For a Few Dollars More (1965)", "The Good, the Bad and the Ugly (1966)"),
)
AGE_TASTES = {
    "1": ("Animation", "Family", "Fantasy", "Adventure"),
    "18": ("Action", "Sci-Fi", "Comedy", "Horror"),
    "25": ("Crime", "Thriller", "Sci-Fi", "Comedy"),
    "35": ("Drama", "Crime", "Thriller", "Romance"),
    "45": ("Drama", "Romance", "War", "Mystery"),
    "50": ("Drama", "Western", "Film-Noir", "Musical"),
    "56": ("Film-Noir", "Musical", "Western", "Romance"),
}
GENDER_TASTES = {"F": ("Romance", "Musical", "Drama"), "M": ("Action", "War", "Western")}
OCCUPATIONS = ("student", "engineer", "artist", "doctor", "writer", "teacher", "retired")


def load_films(path: str | Path = FILMS) -> list[CatalogItem]:
    items = []
    for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 5 or not fields[0] or not fields[1]:
            raise DataError(path, "expected 'title (year) | directors | cast | genres | composer'", line=line_no)
        values = [[v.strip() for v in f.split(",") if v.strip()] for f in fields[1:]]
        relations = {r: v for r, v in zip(RELATIONS, values, strict=True) if v}
        items.append(CatalogItem(str(len(items) + 1), fields[0], relations))
    return items


def simulate(
    items: list[CatalogItem], n_users: int = 300, seed: int = 0
) -> tuple[dict[str, list[str]], dict[str, dict]]:
    """Time-ordered histories and demographics for ``n_users`` simulated users."""
    rng = random.Random(seed)
    by_title = {item.title: item.id for item in items}
    series = [[by_title[t] for t in group] for group in SERIES]
    starts = {group[0]: group for group in series}
    in_series = {i for group in series for i in group[1:]}
    popularity = {item.id: rng.random() for item in items}
    histories, users = {}, {}
    for n in range(1, n_users + 1):
        user = str(n)
        age = rng.choice(list(AGE_TASTES))
        gender = rng.choice("MF")
        occupation = "student" if age in ("1", "18") and rng.random() < 0.7 else rng.choice(OCCUPATIONS)
        genres = set(rng.sample(AGE_TASTES[age], 2)) | {rng.choice(GENDER_TASTES[gender])}
        liked = [i for i in items if genres & set(i.attributes.get("Genre", []))]
        people = {
            p
            for i in rng.sample(liked, min(3, len(liked)))
            for p in i.attributes["Director"] + i.attributes.get("Starring", [])[:1]
        }
        weights = []
        for item in items:
            score = 0.3 + popularity[item.id]
            score += 2.0 * len(genres & set(item.attributes.get("Genre", [])))
            score += 4.0 * len(people & set(item.attributes["Director"] + item.attributes.get("Starring", [])))
            weights.append(0.0 if item.id in in_series else score)
        picked: list[str] = []
        for item_id in _weighted_sample([i.id for i in items], weights, rng.randint(18, 35), rng):
            block = [item_id]
            if item_id in starts and rng.random() < 0.85:
                block = starts[item_id]  # watch the sequels right after the first film
            picked.extend(i for i in block if i not in picked)
        histories[user] = picked
        users[user] = {
            "gender": gender,
            "age": age,
            "occupation": occupation,
            "zip": f"{10000 + n}",
            "genres": sorted(genres),
            "people": sorted(people),
        }
    return histories, users


def rate(items: list[CatalogItem], histories: dict[str, list[str]], users: dict[str, dict], seed: int = 0) -> dict:
    """Star ratings (1-5) for every history entry: the user's leniency plus how well the film fits
    their genres and favourite people, plus noise, so relative ratings carry taste (PerRecBench)."""
    by_id = {item.id: item for item in items}
    ratings = {}
    for user, history in histories.items():
        rng = random.Random(f"ratings/{seed}/{user}")
        leniency = rng.uniform(-0.7, 0.7)
        genres, people = set(users[user]["genres"]), set(users[user]["people"])
        values = []
        for item_id in history:
            relations = by_id[item_id].attributes
            fit = 0.7 * len(genres & set(relations.get("Genre", [])))
            fit += 1.0 * len(people & set(relations["Director"] + relations.get("Starring", [])))
            values.append(max(1, min(5, round(2.4 + leniency + fit + rng.gauss(0, 0.7)))))
        ratings[user] = values
    return ratings


def _weighted_sample(population: list[str], weights: list[float], k: int, rng: random.Random) -> list[str]:
    keyed = sorted(
        ((rng.random() ** (1.0 / w), p) for p, w in zip(population, weights, strict=True) if w > 0), reverse=True
    )
    return [p for _, p in keyed[:k]]


_REVIEWS = {
    5: (("Loved it", "A favourite", "Brilliant"), "{title} is a brilliant {genre} film. {director} at their best."),
    4: (("Very good", "Well worth a watch"), "A very good {genre} film from {director}; {star} is great in it."),
    3: (("Decent", "Mixed feelings"), "{title} has its moments, but the {genre} parts drag."),
    2: (("Disappointing", "Not for me"), "I did not enjoy {title}: {director}'s {genre} style is not my thing."),
    1: (("Awful", "A waste of time"), "{title} bored me from start to finish. Not my kind of {genre} film."),
}


def reviews(items: list[CatalogItem], histories: dict[str, list[str]], ratings: dict[str, list[int]], seed: int = 0):
    """Templated review texts and titles for every rating (Amazon 2018 review format), for LLMRec's
    explanation and summarisation tasks; favourite people of the user get a mention."""
    by_id = {item.id: item for item in items}
    rng = random.Random(f"reviews/{seed}")
    for user, history in histories.items():
        for step, (item_id, rating) in enumerate(zip(history, ratings[user], strict=True)):
            relations = by_id[item_id].attributes
            titles, template = _REVIEWS[rating]
            text = template.format(
                title=by_id[item_id].title,
                genre=rng.choice(relations.get("Genre", ["feature"])).lower(),
                director=relations["Director"][0],
                star=(relations.get("Starring") or relations["Director"])[0],
            )
            yield {
                "reviewerID": user,
                "asin": item_id,
                "overall": float(rating),
                "summary": rng.choice(titles),
                "reviewText": text,
                "unixReviewTime": 978300000 + int(user) * 1000 + step,
            }
