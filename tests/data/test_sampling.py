"""Seeded stratified samples (--max-groups, --max-users): shares by hand, determinism, the record."""

import pytest

from rectune.core.io import RecTuneError
from rectune.data.sampling import activity_band, shares, stratified_choice, stratified_sample


def test_activity_bands():
    bands = [activity_band(n) for n in (1, 9, 10, 19, 20, 49, 50, 99, 100, 199, 200, 499, 500, 7000)]
    assert bands == ["1-9", "1-9", "10-19", "10-19", "20-49", "20-49", "50-99", "50-99", "100-199", "100-199",
                     "200-499", "200-499", "500+", "500+"]  # fmt: skip


def test_shares_are_proportional_with_largest_remainders():
    # 4 of 10: exact 2.0, 1.2, 0.8 -> 2, 1, 0 and the one place left to the largest remainder (hard, 0.8)
    assert shares({"easy": 5, "medium": 3, "hard": 2}, 4) == {"easy": 2, "medium": 1, "hard": 1}
    # 3 of 9: exact 1.0 each
    assert shares({"a": 3, "b": 3, "c": 3}, 3) == {"a": 1, "b": 1, "c": 1}
    # 1 of 2 with equal remainders (0.5, 0.5): the first stratum
    assert shares({"x": 1, "y": 1}, 1) == {"x": 1, "y": 0}


def test_a_stratified_sample_keeps_order_shares_and_totals():
    members = [("easy", i) for i in range(5)] + [("medium", i) for i in range(3)] + [("hard", i) for i in range(2)]
    kept, record = stratified_sample(members, lambda m: m[0], 4, seed=7, what="groups", by="difficulty")
    assert [m[0] for m in kept] == ["easy", "easy", "medium", "hard"]  # the input order
    assert kept == sorted(kept, key=members.index)
    assert record == {
        "groups": {"found": 10, "kept": 4}, "stratified_by": "difficulty", "seed": 7,
        "found": {"easy": 5, "hard": 2, "medium": 3}, "kept": {"easy": 2, "hard": 1, "medium": 1},
    }  # fmt: skip
    again, _ = stratified_sample(members, lambda m: m[0], 4, seed=7, what="groups", by="difficulty")
    assert again == kept
    draws = {tuple(stratified_sample(members, lambda m: m[0], 4, s, "groups", "difficulty")[0]) for s in range(20)}
    assert len(draws) > 1  # the seed chooses which members


def test_no_sample_when_everything_fits_and_a_clear_error_for_zero():
    members = ["a", "b"]
    assert stratified_sample(members, str, None, 0, "users", "activity") == (members, None)
    assert stratified_sample(members, str, 2, 0, "users", "activity") == (members, None)
    with pytest.raises(RecTuneError, match="the sample of users must hold at least 1, got 0"):
        stratified_sample(members, str, 0, 0, "users", "activity")


def test_a_choice_from_the_strata_sizes_keeps_what_the_list_sample_keeps():
    # counting a stream in one pass and keeping ordinals in a second picks the very members the list sample picks
    members = [f"{band}{n}" for n in range(40) for band in "ab" if n % 3 or band == "a"] + ["c0", "c1"]
    kept, record = stratified_sample(members, lambda m: m[0], 9, 7, "groups", "difficulty")
    sizes = {"a": 40, "b": 26, "c": 2}
    chosen, same_record = stratified_choice(sizes, 9, 7, "groups", "difficulty")
    ordinals = {s: [m for m in members if m[0] == s] for s in sizes}
    assert sorted(ordinals[s][n] for s, picked in chosen.items() for n in picked) == sorted(kept)
    assert record == same_record and record["kept"] == {"a": 5, "b": 4, "c": 0}  # 9 * 40/68 = 5.3, 3.4, 0.3
