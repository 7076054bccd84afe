"""The predictions file of a report folder: ``{"id", "completion"}`` rows appended batch by batch, so an
interrupted evaluation resumes where it stopped.

A line cut by an interruption (no newline), not JSON, or not such an object is damaged: it is dropped
and its query asked again, as is a request the endpoint refused (its row holds ``error``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from rectune.benchmarks import get_benchmark
from rectune.core.io import DataError, atomic_write, fault_point, json_line, open_own_file
from rectune.models.control_tokens import ControlText

log = logging.getLogger(__name__)


def read_finished(path: Path, known_ids: set[str]) -> dict[str, str]:
    """Predictions already written; damaged lines are skipped, reported and removed from the file.

    A line is damaged when it was cut by an interruption (no newline), is not JSON, or is not a
    ``{"id", "completion"}`` object: its query is generated again. A well-formed prediction for an
    id that is not in the data means the file belongs to other data, and is refused.
    """
    if not path.is_file() and not path.is_symlink():
        return {}
    finished: dict[str, str] = {}
    kept: list[bytes] = []
    damaged: list[int] = []
    refused = 0
    with open_own_file(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            row = _prediction(raw)
            if row is None:
                damaged.append(line_no)
                continue
            if row["id"] not in known_ids:
                raise DataError(path, f"prediction for id {row['id']!r}: not in this data (write elsewhere)", line_no)
            if row.get("error"):  # a request the endpoint refused: asked again
                refused += 1
                continue
            if row["id"] not in finished:
                finished[row["id"]] = row["completion"]
                kept.append(raw)
    if damaged:
        shown = ", ".join(map(str, damaged[:10])) + (" ..." if len(damaged) > 10 else "")
        log.warning(
            "%s: skipped %d damaged line(s) (line %s); their queries are generated again", path, len(damaged), shown
        )
    if refused:
        log.warning("%s: %d request(s) the endpoint refused last time are sent again", path, refused)
    if damaged or refused:
        with atomic_write(path, "wb") as handle:
            handle.writelines(kept)
    return finished


def _prediction(raw: bytes) -> dict | None:
    """The prediction on one line, or None when the line is damaged."""
    if not raw.endswith(b"\n"):
        return None  # every row is written with its newline: one without was cut by an interruption
    try:
        row = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not isinstance(row.get("completion"), str):
        return None
    return row


def run_generation(
    rows: list,
    predictions_path: Path,
    generate_batches,
    variant: dict,
    known_ids: set[str] | None = None,
    from_rows: bool = False,
    source: str | os.PathLike = "data",
) -> dict[str, str]:
    """Generate what is missing, appending each batch to ``predictions_path`` as it finishes.

    ``known_ids`` are every id of the data (``rows`` may be its first N): predictions for them are kept.
    ``generate_batches`` gets the prompts of the rows to do, or the rows themselves when ``from_rows``
    (a baseline answers from a row's fields, not from a prompt). A prompt holding a control token of the
    model's tokenizer stops the run in one line naming its query in ``source``, the data file.
    """
    finished = read_finished(predictions_path, known_ids or {r.id for r in rows})
    todo = [r for r in rows if r.id not in finished]
    if finished:
        log.info("resuming: %d of %d queries already done", len(finished), len(rows))
    if not todo:
        return finished
    benchmark = get_benchmark(todo[0].benchmark)
    inputs = todo if from_rows else [benchmark.messages(r, variant) for r in todo]
    predictions_path.parent.mkdir(parents=True, exist_ok=True)
    with open_own_file(predictions_path, "a") as handle, _naming_the_query(source, todo):
        for batch in generate_batches(inputs):
            for index, completion, *record in batch:  # an endpoint adds what it reported (tokens, latency)
                row_id = todo[index].id
                finished[row_id] = completion
                line = {"id": row_id, "completion": completion, **(record[0] if record else {})}
                handle.write(json_line(line))
            handle.flush()
            os.fsync(handle.fileno())
            fault_point("eval:batch")
    return finished


@contextlib.contextmanager
def _naming_the_query(source: str | os.PathLike, todo: list) -> Iterator[None]:
    try:
        yield
    except ControlText as err:
        raise DataError(source, f"query {todo[err.index].id}: {err}") from None


def answers_at_token_limit(path: Path, ids: set[str]) -> int | None:
    """How many answers of ``ids`` used every new token they were allowed (``finish_reason`` ``"length"``, as
    generation and OpenAI-compatible servers record it): cut short, perhaps mid-title. None when no answer
    records a finish reason (a baseline's, an answer file's, or predictions written before reasons were)."""
    recorded = cut = 0
    with path.open("rb") as handle:
        for raw in handle:
            row = _prediction(raw)
            if row is not None and row["id"] in ids and row.get("finish_reason") is not None:
                recorded += 1
                cut += row["finish_reason"] == "length"
    return cut if recorded else None


def failed_requests(path: Path, ids: set[str]) -> dict[str, str]:
    """Row id -> the endpoint's error, for the requests of ``ids`` it refused in this run."""
    failed: dict[str, str] = {}
    if not path.is_file():
        return failed
    with path.open("rb") as handle:
        for raw in handle:
            row = _prediction(raw)
            if row is not None and row.get("error") and row["id"] in ids:
                failed[row["id"]] = str(row["error"])
    return failed
