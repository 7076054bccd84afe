"""The DuckDB rating store: which rating of a pair is kept, the orders the builds walk, the per-user facts."""

import tempfile
from pathlib import Path

import pytest
from conftest import can_mount_tmpfs

from rectune.core.io import DataError
from rectune.data.rating_store import RatingStore
from rectune.data.ratings import Review


def test_first_ratings_keep_the_earliest_in_time_then_id_then_file_order():
    reviews = [
        Review("u", "1274", 4.0, 100),
        Review("u", "759", 2.0, 100),  # same second: 759 < 1274 by number, not by text
        Review("u", "759", 5.0, 90),  # rated again earlier in time: this one is the first
        Review("u", "b", 3.0, 50),
        Review("u", "b", 1.0, 50),  # same second and item: file order keeps the 3.0
        Review("v", "b", 2.0, 7),
    ]
    with RatingStore(reviews, {}) as store:
        history = store.first_ratings(["u"])
        assert list(history) == ["u"]
        assert [(r.item, r.rating, r.timestamp) for r in history["u"]] == [
            ("b", 3.0, 50), ("759", 5.0, 90), ("1274", 4.0, 100)
        ]  # fmt: skip
        assert store.count == 6 and store.moved() == 0
        # u: 3 first ratings summing 12 (mean 4); v: 1 rating of 2
        assert store.user_facts(min_history=2) == {"users": 2, "eligible_users": 1, "tied_ratings": 0}


def test_merged_ids_count_as_the_kept_item():
    # "9" is a second listing of "3": u rated both in the same second, the lower id (3) stays
    reviews = [Review("u", "9", 1.0, 10), Review("u", "3", 5.0, 10), Review("v", "9", 4.0, 20)]
    with RatingStore(reviews, {"9": "3"}) as store:
        assert store.moved() == 2
        assert store.rated_items() == ["3"]
        ratings = store.first_ratings(["u", "v"])
        assert [(r.item, r.rating) for r in ratings["u"]] == [("3", 5.0)]
        assert [(r.item, r.rating) for r in ratings["v"]] == [("3", 4.0)]


def test_by_item_walks_items_in_code_point_order_with_relative_ratings():
    reviews = [
        Review("a", "x", 5.0, 30), Review("a", "y", 3.0, 10), Review("a", "Z", 1.0, 10),  # mean 3, one tie
        Review("b", "x", 2.0, 30), Review("b", "y", 4.0, 5),  # mean 3
        Review("c", "x", 4.0, 1),  # one rating: no other item
    ]  # fmt: skip
    with RatingStore(reviews, {}) as store:
        walked = list(store.by_item(min_history=1))
        assert walked == [
            ("Z", [("a", 1.0, -2.0, 10)]),  # "Z" < "x" by code point
            ("x", [("a", 5.0, 2.0, 30), ("b", 2.0, -1.0, 30)]),  # same second: by user
            ("y", [("b", 4.0, 1.0, 5), ("a", 3.0, 0.0, 10)]),
        ]
        assert [item for item, _ in store.by_item(min_history=0)] == ["Z", "x", "y"]
        # a's y and Z share second 10: two tied ratings; c has too few others at min_history 1
        assert store.user_facts(min_history=1) == {"users": 3, "eligible_users": 2, "tied_ratings": 2}
        assert store.scale().as_list() == [1.0, 5.0, 1.0]


def test_a_bad_record_names_the_file_and_line_and_leaves_no_database(tmp_path, monkeypatch):
    ratings = tmp_path / "ratings.dat"
    ratings.write_text("1::10::4::978300760\n1::11::nine::978300761\n")
    scratch = tmp_path / "scratch"  # the store's folder goes here, apart from other tests' stores in the shared /tmp
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with pytest.raises(DataError, match=r"ratings\.dat:2: key 'rating'") as caught:
        RatingStore(ratings, {})
    # removed at once, not when the half-built store is collected (``caught`` keeps its frame alive)
    assert caught.traceback and list(scratch.iterdir()) == []
    good = tmp_path / "good.dat"
    good.write_text("1::10::4::978300760\n")
    store = RatingStore(good, {})  # where a store that builds keeps its folder: the scratch above
    assert [folder.name[:16] for folder in scratch.iterdir()] == ["rectune-ratings-"]
    assert store.user_facts(min_history=0)["users"] == 1


def _holders_written(scratch: Path) -> bool:
    sizes = []
    for folder in scratch.glob("rectune-ratings-*"):
        try:
            sizes.append((folder / ".holder").stat().st_size)
        except OSError:  # not created yet
            sizes.append(0)
    return bool(sizes) and all(sizes)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_terminated_build_leaves_neither_its_store_nor_a_staged_output(tmp_path, sig):
    """A SIGKILL runs no clean-up: the store's folder stays until the next build, which removes it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from perf.movielens_world import synthetic, write

    release = write(tmp_path / "ml", "ml-100k", synthetic(943, 1682, 100_000, seed=0))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = Path(__file__).resolve().parents[2] / "data_prep" / "perrecbench.py"
    command = [sys.executable, str(script), "--reviews", str(release), "--domain", "movies", "--out",
               str(tmp_path / "out")]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(scratch)}
    build = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    # killed before its holder file names it, a folder is left alone (it may be no scratch folder): the
    # kill comes once the build holds its store
    while not _holders_written(scratch) and time.monotonic() < deadline:
        time.sleep(0.01)
    stores = list(scratch.glob("rectune-ratings-*"))
    assert _holders_written(scratch), "the build never opened its rating store"
    build.send_signal(getattr(signal, sig))
    if sig == "SIGTERM":
        assert build.wait(timeout=60) == 128 + signal.SIGTERM
        assert list(scratch.iterdir()) == []
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ml", "scratch"]  # no out/, no staging folder
        return
    assert build.wait(timeout=60) == -signal.SIGKILL and list(scratch.iterdir()) == stores
    again = subprocess.run(command, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"removed {stores[0]} (" in again.stderr and "left by a process that was killed" in again.stderr
    assert list(scratch.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ml", "out", "scratch"]  # the killed run's lock gone too


@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs unshare and a mount namespace (to make a small tmpfs)")
def test_a_temporary_folder_that_fills_is_one_line_saying_where_and_leaves_nothing(tmp_path):
    """The store's database in a 1 MiB temporary folder (a real full disk): DuckDB's own error was a traceback."""
    import re
    import shlex
    import subprocess
    import sys

    from perf.movielens_world import synthetic, write

    release = write(tmp_path / "ml", "ml-100k", synthetic(943, 1682, 100_000, seed=0))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = Path(__file__).resolve().parents[2] / "data_prep" / "perrecbench.py"
    build = shlex.join([sys.executable, str(script), "--reviews", str(release), "--domain", "movies", "--out",
                        str(tmp_path / "out")])  # fmt: skip
    folder = shlex.quote(str(scratch))
    shell = (
        f"mount -t tmpfs -o size=1m tmpfs {folder} && {{ TMPDIR={folder} {build}; echo status=$?; ls -A {folder}; }}"
    )
    result = subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True)
    assert result.stdout.endswith("status=2\n"), result.stderr[-3000:]  # nothing left in the temporary folder
    assert "Traceback" not in result.stderr
    said = rf'error: .*"{re.escape(str(scratch))}/rectune-ratings-\w+/ratings\.duckdb(\.wal)?": No space left on device'
    assert re.fullmatch(
        rf"{said} \(in the temporary folder {re.escape(str(scratch))}: set TMPDIR to a folder on a disk with room\)",
        result.stderr.splitlines()[-1],
    ), result.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ml", "scratch"]  # no out/, no staging folder
