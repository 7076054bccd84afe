"""How built RecBench+ queries read: condition phrases, query templates, demographic group names.

The builder picks among these templates with its seeded generator, so a build stays deterministic.
"""

from __future__ import annotations

PHRASES = {
    "Director": "directed by {}", "Starring": "starring {}", "Composer": "with music by {}", "Year": "from {}",
    "Tag": "tagged '{}'",
}  # fmt: skip
ROLE_NOUNS = {"Director": "director", "Starring": "lead actor", "Composer": "composer", "Year": "release year"}
AGE_GROUPS = {"1": "Under 18", "18": "18-24", "25": "25-34", "35": "35-44", "45": "45-49", "50": "50-55", "56": "56+"}
SITUATIONS = (
    "I'm in the mood for {}. Any suggestions?",
    "Can you suggest some {} for tonight?",
    "My friends are coming over and we want to watch {}. What do you recommend?",
    "I've been looking for {}. What should I watch?",
)
INTEREST_TEMPLATES = (
    "I just watched {a} and then {b}. What should I watch next?",
    "After {a} I went straight to {b}; what would be a good follow-up?",
)
DEMOGRAPHIC_TEMPLATES = (
    "I'm one of the {who}. Which movies do people like me enjoy?",
    "Recommend movies popular with {who}, please.",
)


def describe(conditions: list[tuple[str, str]]) -> str:
    """``[(Genre, Thriller), (Starring, Robert De Niro)]`` -> ``thriller movies starring Robert De Niro``."""
    genres = [v for r, v in conditions if r == "Genre"]
    head = " ".join(g.lower() for g in genres) + " movies" if genres else "movies"
    parts = [PHRASES.get(r, f"with {r.lower()} {{}}").format(v) for r, v in conditions if r != "Genre"]
    if len(parts) > 1:
        return f"{head} {', '.join(parts[:-1])} and {parts[-1]}"
    return f"{head} {parts[0]}" if parts else head


def group_of(profile: dict, group_type: str) -> str:
    if group_type == "gender_age":
        return f"{profile['gender']}_{profile['age']}"
    return str(profile[group_type])


def group_label(group: str, group_type: str) -> str:
    gender = {"M": "Men", "F": "Women"}
    if group_type == "gender":
        return gender[group]
    if group_type == "age":
        return f"Viewers aged {AGE_GROUPS.get(group, group)}"
    if group_type == "gender_age":
        g, age = group.split("_")
        return f"{gender[g]} aged {AGE_GROUPS.get(age, age)}"
    return f"Viewers working as {group}"
