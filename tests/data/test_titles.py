import pytest

from rectune.data.completions import CompletionLimits
from rectune.data.titles import (
    CatalogItem,
    TitleMatcher,
    display_title,
    fix_mojibake,
    parse_mentions,
    split_title,
    title_key,
)

CATALOG = [
    CatalogItem("1", "Usual Suspects, The (1995)"),
    CatalogItem("2", "Boat, The (Das Boot) (1981)"),
    CatalogItem("3", "Heat (1995)"),
    CatalogItem("4", "Psycho (1960)"),
    CatalogItem("5", "Psycho (1998)"),
    CatalogItem("6", "Star Wars: Episode IV - A New Hope (1977)"),
    CatalogItem("7", "City of Lost Children, The (Cité des enfants perdus, La) (1995)"),
    CatalogItem("8", "Crouching Tiger, Hidden Dragon (Wu hu zang long) (2000)"),
    CatalogItem("9", "Amélie (Fabuleux destin d'Amélie Poulain, Le) (2001)"),
    CatalogItem("10", "Shawshank Redemption, The (1994)"),
    CatalogItem("11", "Airplane! (1980)"),
    CatalogItem("12", "Romeo & Juliet (1968)"),
    CatalogItem("13", "Shining, The (1980)"),
    CatalogItem("14", "2001: A Space Odyssey (1968)"),
]


@pytest.fixture(scope="module")
def matcher():
    return TitleMatcher(CATALOG)


@pytest.mark.parametrize(
    ("mention", "expected"),
    [
        ("The Usual Suspects", "1"),  # moved article
        ("Usual Suspects, The (1995)", "1"),  # catalog spelling
        ("the usual suspects (1995)", "1"),  # case
        ("Das Boot", "2"),  # alternate title in parentheses
        ("The Boat (1981)", "2"),
        ("Psycho", "4"),  # no year: first catalog item with the title
        ("Psycho (1998)", "5"),  # year picks the remake
        ("Psycho (1997)", "5"),  # closest year
        ("Star Wars: Episode IV - A New Hope", "6"),  # colon and dash inside the title
        ("The City of Lost Children", "7"),
        ("La Cité des enfants perdus", "7"),  # alternate with its own moved article
        ("Crouching Tiger, Hidden Dragon", "8"),  # comma inside the title
        ("Amelie", "9"),  # accents folded
        ("AmÃ©lie (2001)", "9"),  # mojibake repaired
        ("The Shawshank Redemption.", "10"),  # trailing punctuation
        ("Shawshank Redemtion", "10"),  # fuzzy fallback on a typo
        ("Airplane!", "11"),
        ("Romeo and Juliet", "12"),  # & spelled out
        ("Heatt", None),  # too far for fuzzy on a short title
        ("A Movie That Does Not Exist", None),
        ("", None),
    ],
)
def test_resolve(matcher, mention, expected):
    assert matcher.resolve(mention) == expected


def test_fuzzy_can_be_switched_off(matcher):
    assert matcher.resolve("Shawshank Redemtion", fuzzy=False) is None


@pytest.mark.parametrize(
    ("completion", "ids", "unresolved"),
    [
        (
            "1. **Heat** (1995) - a heist film\n2. The Usual Suspects (1995): twist ending\n3. Made Up Movie",
            ["3", "1"],
            ["made up movie"],
        ),
        ("Here are some movies: Heat, Usual Suspects, The, Crouching Tiger, Hidden Dragon", ["3", "1", "8"], []),
        ("- Star Wars: Episode IV - A New Hope\n- Psycho (1998)\n- Psycho (1998)", ["6", "5"], []),
        ('I recommend "Heat" and "Das Boot" because they are great.', ["3", "2"], []),
        ("Sorry, I cannot find any movie that satisfies this.", [], []),
        ("<think>maybe Heat?</think>\nDas Boot", ["2"], []),
        ("<think>never finished thinking about Heat", [], []),
        ("Heat; Airplane!; Nowhere Film", ["3", "11"], ["nowhere film"]),
        # bracketed numbers are list markers; a year before the title is its year (Psycho 1998, not 1960)
        ("[1] 1985: The Shining\n[2] 1998 - Psycho\n[3] Heat", ["13", "5", "3"], []),
        ("1. 2001: A Space Odyssey\n2. 1995: Heat: a heist film", ["14", "3"], []),  # a title's own year-colon
        ("", [], []),
        ("   \n\n  ", [], []),
        ("x" * 50_000, [], []),
        ("!!!???,,,;;;", [], []),
        # a nested list's details are no titles; a level of headings gives way to the titles under it
        (
            "1. **Heat** (1995)\n   - Director: Michael Mann\n   - Why: tense\n2. **Psycho**\n   - Genre: Horror",
            ["3", "4"],
            [],
        ),
        ("- Heat\n\t* A heist film.\n- Made Up Movie\n\t* A film.", ["3"], ["made up movie"]),
        ("- **Thrillers:**\n  - Heat\n  - Psycho\n- Comedies:\n  - Airplane!", ["3", "4", "11"], []),
        ("- **Thrillers**\n  - Heat\n  - Psycho\n- **Comedies**\n  - Airplane!", ["3", "4", "11"], []),  # no colons
        ("1. Made Up Movie\n   - Genre: Drama", [], ["made up movie"]),  # neither level names one: the shallower
        ("1. Heat\n2. Psycho\n---\nEnjoy them!", ["3", "4"], []),  # a rule under a list is no table
        ("| Title | Year |\n|:---|---:|\n| Heat | 1995 |\n| Made Up Movie | 2001 |", ["3"], ["made up movie"]),
        # the last items of a comma list joined by "and"/"or", with or without the Oxford comma
        ("Heat, Psycho, and Airplane!", ["3", "4", "11"], []),
        ("Heat, Psycho or Made Up Movie", ["3", "4"], ["made up movie"]),
        ("Das Boot & Heat", ["2", "3"], []),
        ("Heat, Romeo and Juliet", ["3", "12"], []),  # a title's own "and" stays
        ("Heat, Harold and Kumar", ["3"], ["harold and kumar"]),  # no side a title: one mention
    ],
)
def test_extract(matcher, completion, ids, unresolved):
    extraction = matcher.extract(completion)
    assert extraction.item_ids == ids
    assert extraction.unresolved == unresolved


AMAZON = [
    CatalogItem(
        "m", "Maybelline New York Makeup, Eye Makeup, Mascara, Volum' Express Lash, Blackest Black, 0.27 Fl Oz"
    ),
    CatalogItem("n", "Neutrogena Hydro Boost Water Gel, 1.7 Fl. Oz"),
    CatalogItem(
        "o", "Olay Regenerist Micro-Sculpting Cream, Face Moisturizer with Hyaluronic Acid, Niacinamide, 1.7 Oz"
    ),
    CatalogItem("b", "Burt's Bees 100% Natural Moisturizing Lip Balm, Original Beeswax - 4 Tubes"),
]


def test_product_titles_one_a_line_are_read_whole_however_many_commas_and_words():
    """LLMRec asks for one title a line; Amazon's titles hold up to half a dozen commas and run past 12 words."""
    matcher = TitleMatcher(AMAZON)
    titles = [item.title for item in AMAZON]
    assert matcher.extract("\n".join(titles)).item_ids == ["m", "n", "o", "b"]  # were n, b: pieces, or "prose"
    assert matcher.extract("\n".join(titles[2:])).item_ids == ["o", "b"]
    assert matcher.extract(titles[0]).item_ids == ["m"]
    assert matcher.extract(f"{titles[3]}, {titles[1]}").item_ids == ["b", "n"]  # a comma list of them still splits


def test_a_chain_of_thousands_of_ands_is_read_in_one_pass(matcher):
    mentions = parse_mentions("Heat and " * 2000 + "Psycho", matcher)  # was a RecursionError
    assert len(mentions) == 2001 and set(mentions[:-1]) == {"Heat"} and mentions[-1] == "Psycho"


def test_extract_never_raises_on_non_text(matcher):
    for value in (None, 42, ["Heat"], {"a": 1}, "\x00\x01\ufffd"):
        assert matcher.extract(value).count == 0


def test_extract_caps_mentions():
    matcher = TitleMatcher(CATALOG, limits=CompletionLimits(max_mentions=5))
    text = "\n".join(f"- Invented Title {i}" for i in range(1000))
    assert matcher.extract(text).count == 5


def test_split_and_display():
    assert split_title("Boat, The (Das Boot) (1981)") == ("Boat, The", ["Das Boot"], 1981)
    assert split_title("(500) Days of Summer (2009)") == ("(500) Days of Summer", [], 2009)
    assert display_title("Usual Suspects, The (1995)") == "The Usual Suspects (1995)"
    assert display_title("Boat, The (Das Boot) (1981)") == "The Boat (1981)"
    assert display_title("Dune") == "Dune"
    assert fix_mojibake("CitÃ© des enfants") == "Cité des enfants"
    assert fix_mojibake("plain") == "plain"


def test_parse_without_matcher_cuts_descriptions():
    assert parse_mentions("1. Heat (1995) - great\n2. Ronin: a spy thriller") == ["Heat (1995)", "Ronin"]


@pytest.mark.parametrize(
    "answer, mentions",
    [
        ("The Breakfast Club [SEP] Ferris Bueller's Day Off [SEP] The Goonies",
         ["The Breakfast Club", "Ferris Bueller's Day Off", "The Goonies"]),
        ("Heat (1995)[SEP]Ronin (1998)[SEP]", ["Heat (1995)", "Ronin (1998)"]),  # no spaces, trailing separator
        ("\"Heat\" [SEP] 'Ronin' [sep] Casino", ["Heat", "Ronin", "Casino"]),  # quotes, lower-case separator
        ("Usual Suspects, The (1995) [SEP] Heat", ["Usual Suspects, The (1995)", "Heat"]),  # commas stay in a title
        ("Here are my picks: Heat [SEP] Ronin\n\nThese films all star Robert De Niro.", ["Heat", "Ronin"]),
        ("Heat", ["Heat"]),  # one title, no separator: still a mention
    ],
)  # fmt: skip
def test_parse_sep_answers(answer, mentions):
    assert parse_mentions(answer) == mentions


def test_sep_answers_resolve_and_keep_their_order(matcher):
    extraction = matcher.extract("Heat [SEP] Usual Suspects, The [SEP] Invented Film [SEP] Heat (1995) [SEP]")
    assert extraction.item_ids == ["3", "1"]
    assert extraction.ranked == ["3", "1", "invented film"]  # the repeated Heat counts once


@pytest.mark.parametrize(
    ("title", "key"),
    [
        ("Don't_Look-Now! & Co.", "don t look now and co"),  # every ASCII mark a space, & spelled out
        ("  Usual Suspects, The  ", "usual suspects"),  # trailing article moved, then dropped
        ("L'Avventura", "avventura"),
        ("M*A*S*H\t(TV)", "m a s h tv"),
        ("Amélie & Co.", "amelie and co"),  # the accented path reads the same
        ("Ã‰cole, L'", "ecole"),  # mojibake repaired, article dropped
        ("The", "the"),  # an article alone is a title
    ],
)
def test_title_keys(title, key):
    assert title_key(title) == key


PLAIN_ITEMS = [
    # (a list item's text, its mentions)
    ("Heat", ["Heat"]),
    ("  'Heat'.  ", ["Heat"]),
    ("'' 'Heat", ["Heat"]),  # quotes, a space, a quote: cleaned twice, as the general reading does
    ("Usual Suspects, The", ["Usual Suspects, The"]),  # a comma in an item stays: one title a line
    ("Heat, Ronin", ["Heat, Ronin"]),
    ("Heat|Ronin —Casino", ["Heat|Ronin —Casino"]),  # a bar or dash without spaces cuts nothing
    ("Seven.", ["Seven"]),
    ("Amélie", ["Amélie"]),
    ("", []),
    ("   ", []),
    ("Here are some films you might enjoy this weekend with your family.", []),  # prose
    ("1985- The Shining", ["The Shining (1985)"]),  # a year first: the general reading
    ("2001 A Space Odyssey", ["2001 A Space Odyssey"]),
    ("Heat (1995) - a heist film", ["Heat (1995)"]),
    ("Heat by Michael Mann", ["Heat"]),
    ("Star Wars: Episode IV - A New Hope", ["Star Wars: Episode IV - A New Hope"]),
    ("*Heat*", ["Heat"]),
]


@pytest.mark.parametrize(("item", "mentions"), PLAIN_ITEMS)
def test_a_plain_list_item_reads_as_the_general_reading_does(matcher, item, mentions):
    from rectune.data.mentions import _any_line_mentions, _line_mentions

    assert _line_mentions(item, True, matcher) == mentions
    assert _any_line_mentions(item, True, matcher) == mentions
