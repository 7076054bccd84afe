"""A source's ratings in DuckDB on disk, so builds hold up at the releases' real sizes (ML-25M, Amazon 2023).

Reviews are parsed one at a time (:func:`rectune.data.ratings.iter_reviews`: every record checked, errors name
the file, line and key) and appended to a DuckDB database in batches. Keeping each user's first rating
of each item, per-user counts and means, k-cores and the orderings the builds walk run inside DuckDB,
which spills to disk past its memory limit; Python holds one batch, one item's ratings or the ratings
of the users asked for at a time.

Orders are the in-memory builds' own: ids compare by code point (DuckDB's binary collation); a user's
ratings go by time, equal timestamps by the item's numeric id (:func:`rectune.data.item_ids.id_order`, as
a rank over the source's items), then by file order. Ids merged into another (MovieLens titles listed
twice, ``canonical``) count as the kept id; of a user's ratings of both copies the first stays.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

import pyarrow as pa
from tqdm import tqdm

from rectune.core.scratch import scratch_folder
from rectune.data.item_ids import id_order
from rectune.data.ratings import RatingScale, Review, iter_reviews

BATCH = 100_000  # reviews parsed per insert: bounds what Python holds while reading
MEMORY_LIMIT = "2GB"  # DuckDB's own; past it, sorts and aggregates spill to the store's folder
SCRATCH_PREFIX = "rectune-ratings-"  # the store's folder in the temporary directory
RELEASED_LIMIT = "64MB"  # set for a moment between steps: DuckDB then frees what it cached beyond it


class RatingStore:
    """The ratings of ``reviews`` (a file or folder :func:`iter_reviews` reads, or reviews) in a temporary
    DuckDB database.

    ``with_text`` keeps review titles and texts (LLMRec's explanation and summary tasks) too.
    Use as a context manager: the database is removed on exit."""

    def __init__(
        self,
        reviews: str | os.PathLike | Iterable[Review],
        canonical: dict[str, str],
        with_text: bool = False,
        memory_limit: str = MEMORY_LIMIT,
    ):
        # imported here, not with the module: only the rating store needs duckdb (a GPU kit leaves it out);
        # before the scratch folder exists, so a termination never lands inside duckdb's own start-up
        import duckdb

        self.scratch = contextlib.ExitStack()  # a folder the next store removes, should this process be killed
        folder = self.scratch.enter_context(scratch_folder(SCRATCH_PREFIX))
        try:
            self.db = duckdb.connect(
                str(folder / "ratings.duckdb"),
                config={"memory_limit": memory_limit, "temp_directory": str(folder / "spill")},
            )
        except BaseException:
            self.scratch.close()
            raise
        self.with_text, self.memory_limit = with_text, memory_limit
        try:
            self.count = self._read(reviews)
            self._index(canonical)
        except BaseException:  # a bad record or an interrupt: leave nothing behind
            self.__exit__()
            raise

    def __enter__(self) -> RatingStore:
        return self

    def __exit__(self, *_exc) -> None:
        self.db.close()
        self.scratch.close()

    def _read(self, reviews: str | os.PathLike | Iterable[Review]) -> int:
        text = ", title VARCHAR, text VARCHAR" if self.with_text else ""
        self.db.execute(f"CREATE TABLE reviews (seq BIGINT, user VARCHAR, source_item VARCHAR, rating DOUBLE, "
                        f"ts BIGINT{text})")  # fmt: skip
        columns: dict[str, list] = {name: [] for name in self._columns()}
        source = iter_reviews(reviews) if isinstance(reviews, (str, os.PathLike)) else reviews
        count = 0
        for count, review in enumerate(tqdm(source, desc="reading ratings", unit=" ratings",
                                            unit_scale=True, disable=None), start=1):  # fmt: skip
            columns["seq"].append(count)
            columns["user"].append(review.user)
            columns["source_item"].append(review.item)
            columns["rating"].append(review.rating)
            columns["ts"].append(review.timestamp)
            if self.with_text:
                columns["title"].append(review.title)
                columns["text"].append(review.text)
            if len(columns["seq"]) == BATCH:
                self._append(columns)
        self._append(columns)
        return count

    def _columns(self) -> tuple[str, ...]:
        return ("seq", "user", "source_item", "rating", "ts") + (("title", "text") if self.with_text else ())

    def _append(self, columns: dict[str, list]) -> None:
        batch = pa.table(columns)  # noqa: F841 (DuckDB reads the local by name)
        self.db.execute("INSERT INTO reviews SELECT * FROM batch")
        for values in columns.values():
            values.clear()

    def _index(self, canonical: dict[str, str]) -> None:
        self.merged = bool(canonical)
        aliases = pa.table({"alias": list(canonical), "kept": list(canonical.values())})  # noqa: F841
        self.db.execute("CREATE TABLE aliases AS SELECT * FROM aliases")
        ids = {row[0] for row in self.db.execute("SELECT DISTINCT source_item FROM reviews").fetchall()}
        ids.update(canonical.values())
        ranked = sorted(ids, key=id_order)
        ranks = pa.table({"item": ranked, "rank": list(range(len(ranked)))})  # noqa: F841
        self.db.execute("CREATE TABLE ranks AS SELECT * FROM ranks")
        # each user's first rating of each (kept) item, chosen by time, then the rated id's rank, then file order
        self.db.execute("""
            CREATE TABLE first AS
            SELECT f.user, f.item, f.pick.rating AS rating, f.pick.ts AS ts, k.rank AS rank, f.pick.seq AS seq
            FROM (
                SELECT r.user, coalesce(a.kept, r.source_item) AS item,
                       min({'ts': r.ts, 'rank': s.rank, 'seq': r.seq, 'rating': r.rating}) AS pick
                FROM reviews r JOIN ranks s ON r.source_item = s.item LEFT JOIN aliases a ON r.source_item = a.alias
                GROUP BY ALL
            ) f JOIN ranks k ON f.item = k.item
        """)
        self.db.execute("CREATE TABLE users AS SELECT user, count(*) AS n, sum(rating) AS total FROM first GROUP BY 1")
        self._release()

    def _release(self) -> None:
        """Hand the buffers a finished step used back to the system: DuckDB keeps freed memory, up to its
        limit, for the next query, while the Python side of a build needs it now (350 MB at ML-1M size)."""
        self.db.execute(f"SET memory_limit = '{RELEASED_LIMIT}'")
        self.db.execute(f"SET memory_limit = '{self.memory_limit}'")

    def scale(self) -> RatingScale:
        low, high, whole = self.db.execute(
            "SELECT min(rating), max(rating), bool_and(rating = floor(rating)) FROM reviews"
        ).fetchone()
        return RatingScale.seen(low, high, whole)

    def moved(self) -> int:
        """Ratings of a merged id (moved onto the kept one)."""
        query = "SELECT count(*) FROM reviews WHERE source_item IN (SELECT alias FROM aliases)"
        return self.db.execute(query).fetchone()[0]

    def rated_items(self) -> list[str]:
        """Every item someone rated (merged ids as the kept one)."""
        return [row[0] for row in self.db.execute("SELECT DISTINCT item FROM first ORDER BY item").fetchall()]

    def user_facts(self, min_history: int) -> dict:
        """Users; those with ``min_history`` other rated items; first ratings sharing their second with
        another of the same user's."""
        users, eligible = self.db.execute(f"SELECT count(*), count(*) FILTER (n - 1 >= {int(min_history)}) "
                                          "FROM users").fetchone()  # fmt: skip
        tied = self.db.execute(
            "SELECT coalesce(sum(c), 0) FROM (SELECT count(*) AS c FROM first GROUP BY user, ts HAVING c > 1)"
        ).fetchone()[0]
        return {"users": users, "eligible_users": eligible, "tied_ratings": int(tied)}

    def by_item(self, min_history: int) -> Iterator[tuple[str, list[tuple[str, float, float, int]]]]:
        """Item by item (by id), the first ratings of users with ``min_history`` other items:
        ``(user, rating, rating - the user's mean, timestamp)`` by time, then user."""
        query = self.db.sql(f"""
            SELECT f.item, f.user, f.rating, f.rating - u.total / u.n, f.ts
            FROM first f JOIN users u ON f.user = u.user WHERE u.n - 1 >= {int(min_history)}
            ORDER BY f.item, f.ts, f.user
        """)
        item, ratings = None, []
        users: dict[str, str] = {}  # one string per user: the groups kept hold millions of members at ML-25M
        for batch in query.to_arrow_reader(BATCH):
            columns = [column.to_pylist() for column in batch.columns]
            for row_item, user, *rest in zip(*columns, strict=True):
                if row_item != item:
                    if ratings:
                        yield item, ratings
                    item, ratings = row_item, []
                ratings.append((users.setdefault(user, user), *rest))
        if ratings:
            yield item, ratings
        self._release()

    def user_counts(self) -> dict[str, int]:
        """Each user's count of first ratings, users in the order they first appear in the source."""
        return dict(self.db.execute("SELECT user, n FROM users JOIN (SELECT user, min(seq) AS since FROM first "
                                    "GROUP BY 1) USING (user) ORDER BY since").fetchall())  # fmt: skip

    def unknown_item(self, known: Iterable[str]) -> tuple[str, str] | None:
        """The first (user, item) in file order whose item is not in ``known``, if any."""
        ids = pa.table({"item": list(known)})  # noqa: F841
        return self.db.execute(
            "SELECT user, item FROM first WHERE item NOT IN (SELECT item FROM ids) ORDER BY seq LIMIT 1"
        ).fetchone()

    def first_ratings(self, users: Iterable[str], in_core: bool = False) -> dict[str, list[Review]]:
        """The first ratings of ``users`` (those in the :meth:`k_core` only, with ``in_core``), each user's in
        time order; with their review's title and text when the store keeps them."""
        wanted = pa.table({"user": sorted(set(users))})  # noqa: F841
        core = "JOIN core c ON f.user = c.user AND f.item = c.item" if in_core else ""
        text = ", r.title, r.text" if self.with_text else ""
        source = "JOIN reviews r ON f.seq = r.seq" if self.with_text else ""
        query = self.db.sql(f"""
            SELECT f.user, f.item, f.rating, f.ts{text} FROM first f JOIN wanted w ON f.user = w.user {core} {source}
            ORDER BY f.user, f.ts, f.rank, f.seq
        """)
        by_user: dict[str, list[Review]] = {}
        ids: dict[str, str] = {}  # one string per item id, not one per rating: millions of ratings, thousands of items
        for batch in query.to_arrow_reader(BATCH):
            for user, item, *rest in zip(*(column.to_pylist() for column in batch.columns), strict=True):
                history = by_user.get(user)
                if history is None:
                    history = by_user[user] = []
                history.append(Review(history[0].user if history else user, ids.setdefault(item, item), *rest))
        self._release()
        return by_user

    def has_text(self) -> bool:
        """Whether any review has a text (MovieLens: ratings only)."""
        return self.with_text and bool(self.db.execute("SELECT bool_or(text <> '') FROM reviews").fetchone()[0])

    def k_core(self, k: int) -> dict[str, int]:
        """Keep, as the core, the first ratings left once users and items with fewer than ``k`` of them are
        dropped, again until none is (the k-core is the same whatever the order of drops). Returns each
        core user's count of ratings."""
        self.db.execute("CREATE OR REPLACE TABLE core AS SELECT user, item, ts FROM first")
        while True:
            (dropped,) = self.db.execute(f"""
                DELETE FROM core WHERE user IN (SELECT user FROM core GROUP BY 1 HAVING count(*) < {int(k)})
                OR item IN (SELECT item FROM core GROUP BY 1 HAVING count(*) < {int(k)})
            """).fetchone()
            if not dropped:
                break
        counts = dict(self.db.execute("SELECT user, count(*) FROM core GROUP BY 1").fetchall())
        self._release()
        return counts

    def core_items(self) -> list[str]:
        return [row[0] for row in self.db.execute("SELECT DISTINCT item FROM core ORDER BY 1").fetchall()]

    def core_tied_last(self) -> int:
        """Core users whose last two ratings share a second."""
        return self.db.execute("""
            SELECT count(*) FROM (
                SELECT c.user FROM core c JOIN (SELECT user, max(ts) AS last FROM core GROUP BY 1) m
                ON c.user = m.user AND c.ts = m.last GROUP BY 1 HAVING count(*) > 1
            )
        """).fetchone()[0]
