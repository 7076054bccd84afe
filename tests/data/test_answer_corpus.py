"""Answers read as the model meant them: a corpus of `[SEP]` answers of every query type and both domains,
in the shapes chat models give (clean, with an intro, with a closing line, with emphasis and authors,
titles that read like sentences), and list answers with titles quoted around the list. Each answer's
recommendations are written out by hand."""

import pytest

from rectune.data.mentions import parse_mentions

SEP_CORPUS = [
    # (query type, answer, the recommendations it makes)
    (
        "explicit",
        "Heat (1995) [SEP] Ronin (1998) [SEP] Casino (1995)",
        ["Heat (1995)", "Ronin (1998)", "Casino (1995)"],
    ),
    (
        "explicit",
        "This Is Spinal Tap [SEP] Best in Show [SEP] A Mighty Wind",
        ["This Is Spinal Tap", "Best in Show", "A Mighty Wind"],
    ),
    (
        "explicit",
        "O Brother, Where Art Thou? [SEP] Fargo (1996) [SEP] The Big Lebowski",
        ["O Brother, Where Art Thou?", "Fargo (1996)", "The Big Lebowski"],
    ),
    (
        "explicit",
        "Who's Afraid of Virginia Woolf? [SEP] The Graduate [SEP] Cleopatra (1963)",
        ["Who's Afraid of Virginia Woolf?", "The Graduate", "Cleopatra (1963)"],
    ),
    (
        "implicit",
        "I Know What You Did Last Summer (1997) [SEP] Scream (1996) [SEP] Urban Legend (1998)",
        ["I Know What You Did Last Summer (1997)", "Scream (1996)", "Urban Legend (1998)"],
    ),
    ("implicit", "Sorry to Bother You [SEP] Get Out [SEP] Us", ["Sorry to Bother You", "Get Out", "Us"]),
    (
        "implicit",
        "Notes on a Scandal (2006) [SEP] The Queen (2006) [SEP] Iris (2001)",
        ["Notes on a Scandal (2006)", "The Queen (2006)", "Iris (2001)"],
    ),
    (
        "interest",
        "This Is the End [SEP] Superbad [SEP] Pineapple Express",
        ["This Is the End", "Superbad", "Pineapple Express"],
    ),
    (
        "interest",
        "I'm Thinking of Ending Things (2020) [SEP] Anomalisa (2015) [SEP] Synecdoche, New York (2008)",
        ["I'm Thinking of Ending Things (2020)", "Anomalisa (2015)", "Synecdoche, New York (2008)"],
    ),
    (
        "interest",
        "Do Androids Dream of Electric Sheep? by Philip K. Dick [SEP] Neuromancer by William Gibson",
        ["Do Androids Dream of Electric Sheep?", "Neuromancer"],
    ),
    (
        "demographics",
        "I Know Why the Caged Bird Sings by Maya Angelou [SEP] Beloved by Toni Morrison [SEP] "
        "The Color Purple by Alice Walker",
        ["I Know Why the Caged Bird Sings", "Beloved", "The Color Purple"],
    ),
    (
        "misinformed",
        "It seems there might be a misunderstanding. *Little Women* was written by Louisa May Alcott, "
        "not George Berkeley. If you enjoyed *Little Women*, here are some classic juvenile fiction books: "
        "*Anne of Green Gables* by L.M. Montgomery [SEP] *Eight Cousins* by Louisa May Alcott [SEP] "
        "*The Secret Garden* by Frances Hodgson Burnett",
        ["Anne of Green Gables", "Eight Cousins", "The Secret Garden"],
    ),
    (
        "misinformed",
        "Actually, Heat was directed by Michael Mann, not Ridley Scott.\n\nThief (1981) [SEP] "
        "Collateral (2004) [SEP] Manhunter (1986)",
        ["Thief (1981)", "Collateral (2004)", "Manhunter (1986)"],
    ),
    (
        "misinformed",
        "Note that Fargo came out in 1996, not 1994. Here are films like it: Blood Simple [SEP] "
        "No Country for Old Men [SEP] Miller's Crossing",
        ["Blood Simple", "No Country for Old Men", "Miller's Crossing"],
    ),
    (
        "explicit",
        "Here are some recommendations:\nAlien (1979) [SEP] Aliens (1986) [SEP] The Thing (1982)\n\n"
        "These films mix science fiction and horror.",
        ["Alien (1979)", "Aliens (1986)", "The Thing (1982)"],
    ),
    (
        "explicit",
        "Mad Max: Fury Road [SEP] Star Wars: Episode IV - A New Hope (1977) [SEP] Blade Runner",
        ["Mad Max: Fury Road", "Star Wars: Episode IV - A New Hope (1977)", "Blade Runner"],
    ),
    (
        "explicit",
        "The Lord of the Rings: The Two Towers [SEP] Willow [SEP] Heat [SEP] Here are more you may like: Ronin",
        ["The Lord of the Rings: The Two Towers", "Willow", "Heat", "Ronin"],
    ),
    ("interest", "**The Godfather** [SEP] **Goodfellas** [SEP] **Casino**", ["The Godfather", "Goodfellas", "Casino"]),
    ("interest", "The Shining[SEP]Misery[SEP]Carrie[SEP]", ["The Shining", "Misery", "Carrie"]),
    (
        "demographics",
        "Toy Story (1995) [SEP] Finding Nemo (2003) [SEP] Up (2009). I hope you enjoy these films!",
        ["Toy Story (1995)", "Finding Nemo (2003)", "Up (2009)"],
    ),
    (
        "demographics",
        "Mr. Smith Goes to Washington [SEP] It's a Wonderful Life [SEP] Mr. Deeds Goes to Town",
        ["Mr. Smith Goes to Washington", "It's a Wonderful Life", "Mr. Deeds Goes to Town"],
    ),
    (
        "explicit",
        "M*A*S*H (1970) [SEP] Catch-22 (1970) [SEP] Kelly's Heroes (1970)",
        ["M*A*S*H (1970)", "Catch-22 (1970)", "Kelly's Heroes (1970)"],
    ),
    (
        "implicit",
        "Where the Wild Things Are [SEP] What We Do in the Shadows [SEP] Who Framed Roger Rabbit",
        ["Where the Wild Things Are", "What We Do in the Shadows", "Who Framed Roger Rabbit"],
    ),
    (
        "interest",
        "You Can Count on Me [SEP] If Beale Street Could Talk [SEP] There Will Be Blood",
        ["You Can Count on Me", "If Beale Street Could Talk", "There Will Be Blood"],
    ),
    (
        "demographics",
        "Sure! The Hobbit by J.R.R. Tolkien [SEP] Watership Down by Richard Adams",
        ["Sure! The Hobbit", "Watership Down"],
    ),
]


@pytest.mark.parametrize(("task", "answer", "expected"), SEP_CORPUS, ids=[f"{t}-{i}" for i, (t, *_) in
                                                                           enumerate(SEP_CORPUS)])  # fmt: skip
def test_every_sep_piece_is_one_recommendation_less_intro_and_outro(task, answer, expected):
    assert parse_mentions(answer) == expected


def test_the_corpus_agrees_with_the_plain_sep_split_where_there_is_no_prose():
    """Answers with no intro or outro: RecTune's reading is the authors' split, piece for piece (less the
    author and emphasis the scorer trims in both)."""
    plain = [(a, e) for t, a, e in SEP_CORPUS if "\n" not in a and ":" not in a.split("[SEP]")[0] and "!" not in a]
    assert len(plain) >= 15
    assert all(parse_mentions(answer) == expected for answer, expected in plain)


LIST_ANSWERS = [
    (
        'Since you loved "Heat", here are three more:\n1. Ronin (1998)\n2. The Insider (1999)\n3. Thief (1981)\n'
        'Like "Heat", they are tense crime films.',
        ["Ronin (1998)", "The Insider (1999)", "Thief (1981)"],
    ),
    (
        "If *Little Women* was your favourite, try these:\n- *Eight Cousins*\n- *Jo's Boys*\n\nEnjoy!",
        ["Eight Cousins", "Jo's Boys"],
    ),
    ('For fans of "Alien":\nAliens\nThe Thing\nEvent Horizon', ["Aliens", "The Thing", "Event Horizon"]),
]


@pytest.mark.parametrize(("answer", "expected"), LIST_ANSWERS)
def test_titles_quoted_around_a_list_are_not_recommendations(answer, expected):
    assert parse_mentions(answer) == expected


def test_answers_without_a_list_keep_their_reading():
    assert parse_mentions('I would suggest "Heat" or "Ronin" for a tense night.') == ["Heat", "Ronin"]
    assert parse_mentions("Heat, Ronin, Casino") == ["Heat", "Ronin", "Casino"]
    assert parse_mentions("Sorry, I cannot recommend anything without more details about your taste.") == []
