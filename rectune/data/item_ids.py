"""Item ids as numbers, and their order: numeric ids by value.

Releases write ids as text; MovieLens's are whole numbers, and ratings given in the same second are ordered by
them ("759" before "1274", :func:`rectune.data.movielens.chronological`) so every build gives the same histories
whatever the file order. The ids are a stranger's text: they are compared as digit strings and converted only
where short (``int`` refuses 4,300 digits or more, and ``isdigit`` also takes ``"²"``, which ``int`` refuses).
"""

from __future__ import annotations


def whole_number(text: str) -> int | None:
    """``text`` as a whole number where it is written in ASCII digits and fits 64 bits (ids, ages, genre indices),
    else None. ``isdigit`` alone also takes ``"²"``, which ``int`` refuses, as it refuses 4,300 digits or more."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def release_id(item_id: str) -> int | str:
    """An item id as RecBench+'s release writes it: a number where the id is one (MovieLens's), else its text."""
    number = whole_number(item_id)
    return item_id if number is None else number


def id_order(item_id: str) -> tuple:
    """Numeric ids by value ("759" < "1274"), equal values ("01", "1") by text, other ids after them by text.
    Compared as digit strings, never converted: an id of 5,000 digits is past ``int``'s limit, and ``"²"`` is a
    digit to ``isdigit`` that ``int`` refuses."""
    if item_id.isascii() and item_id.isdigit():
        value = item_id.lstrip("0")
        return (0, len(value), value, item_id)
    return (1, item_id)
