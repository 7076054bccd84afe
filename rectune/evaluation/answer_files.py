"""Model answers in the shapes they are distributed in, and OpenAI Batch request files.

Answer files read by :func:`load_answers`, one object per line (JSONL, also in a file named
``.json``) or one JSON list:

* RecTune's ``{"id", "completion"}`` rows (``predictions.jsonl``, generated ones with a ``"finish_reason"``);
* the RecBench+ authors' ``{"id", "response"}`` lines (``...-prediction.jsonl``,
  ``...-OpenaiBatchFile-0_output.jsonl``); DeepSeek-R1's extra ``"reasoning"`` is not read;
* OpenAI Batch API output files: ``{"custom_id", "response": {"status_code", "body": {"choices":
  [{"message": {"content"}, "finish_reason"}]}}}``; a separate ``reasoning_content`` is not read. A request that
  failed (``"error"``, a status other than 200, no choices) stops scoring, as the live backend's do,
  unless failures are to be scored as empty answers (and counted in the report).

Ids may be RecTune row ids or the release's bare ids (``"3862"``, ``"0-1"``), which
:func:`resolve_ids` finds within one task.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import NamedTuple

from rectune.core.io import DataError, RecTuneError, atomic_write, parse_json, require_file
from rectune.evaluation.endpoint_request import content_text

log = logging.getLogger(__name__)

BATCH_URL = "/v1/chat/completions"


def _objects(path: Path) -> list[tuple[int, object]]:
    """(line or position, value) of every answer in a JSONL file or a JSON list."""
    require_file(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(path, f"not UTF-8 text (byte {err.start + 1})") from None
    if text.lstrip().startswith("["):
        return list(enumerate(parse_json(text, path), start=1))
    objects = []
    # JSONL lines end at "\n" alone: str.splitlines() would also cut at U+2028, U+0085, ... inside a JSON string
    for line_no, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            objects.append((line_no, parse_json(line, path, line_no)))
    return objects


class Answers(NamedTuple):
    """An answer file's content, keyed by the ids it uses."""

    texts: dict[str, str]  # id -> answer text (empty for a failed request)
    failed: dict[str, str]  # id -> why its request failed
    finish_reasons: dict[str, str]  # id -> "stop", "length", ..., for the answers that record one


def _answer(raw: object, path: Path, line: int) -> tuple[str, str, str | None, str | None]:
    """(id, answer text, why the request failed or None, finish reason or None) of one answer object in any of
    the shapes above."""
    if not isinstance(raw, dict):
        raise DataError(path, f"expected a JSON object, got {type(raw).__name__}", line=line)
    row_id = raw["custom_id"] if "custom_id" in raw else raw.get("id")  # a batch output's "id" is the provider's
    if isinstance(row_id, bool) or not isinstance(row_id, (str, int)):
        raise DataError(path, "field 'id' (or 'custom_id'): must be a string or an integer", line=line)
    if "completion" in raw:
        text, finish = raw["completion"], raw.get("finish_reason")
    elif raw.get("error"):  # the batch API's failed request, whatever else the line holds
        return str(row_id), "", f"error {_short(raw['error'])}", None
    elif isinstance(raw.get("response"), dict):
        return (str(row_id), *_batch_body(raw["response"], path, line, row_id))
    else:
        text, finish = raw.get("response"), None
    if not isinstance(text, str):
        raise DataError(path, f"answer {row_id!r}: needs 'completion', 'response' or a batch 'response' body", line)
    return str(row_id), text, None, _finish_reason(finish)


def _batch_body(response: dict, path: Path, line: int, row_id: object) -> tuple[str, str | None, str | None]:
    """(text, failure, finish reason) of a batch output's ``response``: a non-200 status or a body without
    choices failed."""
    status, body = response.get("status_code"), response.get("body")
    if status not in (None, 200) or not isinstance(body, dict):
        message = body.get("error") if isinstance(body, dict) else body
        return "", f"HTTP {_short(status)} {_short(message)}", None
    choices = body.get("choices")
    if choices is not None and not isinstance(choices, list):
        raise DataError(path, f"answer {row_id!r}: 'choices' must be a list", line)
    if not choices:
        return "", f"no choices in the body {_short(body)}", None
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message")
    content = content_text(message.get("content") if isinstance(message, dict) else None)
    if content is None:
        raise DataError(path, f"answer {row_id!r}: the message's 'content' must be text or a list of text parts", line)
    # a reasoning model may answer with reasoning alone
    return content[0], None, _finish_reason(choice.get("finish_reason"))


def _finish_reason(value: object) -> str | None:
    """A recorded finish reason as a short string, None where the file records none."""
    return None if value is None else _short(value)


def _short(value: object) -> str:
    """A server's error as one short line (it may be long, nested or hold line breaks)."""
    if isinstance(value, dict) and isinstance(value.get("message"), str):
        value = value["message"]
    return " ".join(str(value).split())[:200]


def load_answers(path: str | os.PathLike) -> Answers:
    """The answers of a file in any supported shape; a failed request's answer is empty; a duplicate id is
    an error."""
    path = Path(path)
    answers = Answers({}, {}, {})
    for line, raw in _objects(path):
        row_id, text, failure, finish = _answer(raw, path, line)
        if row_id in answers.texts:
            raise DataError(path, f"duplicate answer for id {row_id!r}", line=line)
        answers.texts[row_id] = text
        if failure is not None:
            answers.failed[row_id] = failure
        if finish is not None:
            answers.finish_reasons[row_id] = finish
    if not answers.texts:
        raise DataError(path, "file holds no answers")
    return answers


def check_failures(failed: dict[str, str], total: int, noun: str, *, as_empty: bool, source: object = None) -> None:
    """Stop in one line when requests failed: "[SOURCE: ]N of M ``noun`` failed: REASON" (``as_empty``: a
    warning, and they are scored as empty answers)."""
    if not failed:
        return
    reasons = sorted(set(failed.values()))
    summary = f"{f'{source}: ' if source else ''}{len(failed)} of {total} {noun} failed: {reasons[0]}" + (
        f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else ""
    )
    if as_empty:
        log.warning("%s; scored as empty answers (--score-failures-as-empty)", summary)
        return
    raise RecTuneError(f"{summary}; nothing was scored: rerun to ask them again, or pass --score-failures-as-empty "
                       "to score them as empty answers")  # fmt: skip


def resolve_ids(answers: dict[str, str], rows: list, path: str | os.PathLike, task: str | None) -> dict[str, str]:
    """Answers keyed by row id; bare release ids are looked up among ``task``'s rows (or the only task's)."""
    ids = {row.id for row in rows}
    by_release_id: dict[str, list[str]] = {}
    for row in rows:
        by_release_id.setdefault(row.id.rsplit("/", 1)[-1], []).append(row.id)
    resolved: dict[str, str] = {}
    for answer_id, text in answers.items():
        row_id = answer_id
        if answer_id not in ids and answer_id in by_release_id:
            candidates = by_release_id[answer_id]
            if len(candidates) > 1:
                tasks = sorted({c.split("/")[1] for c in candidates if c.count("/") == 2})
                hint = f"pass --task ({', '.join(tasks)})" if task is None else "the data holds both domains"
                raise RecTuneError(f"{path}: id {answer_id!r} names {len(candidates)} queries; {hint}")
            row_id = candidates[0]
        if row_id in resolved:
            raise DataError(path, f"two answers for query {row_id!r}")
        resolved[row_id] = text
    return resolved


def batch_request(row_id: str, messages: list[dict], model: str, max_tokens: int) -> dict:
    """One OpenAI Batch API request in the RecBench+ authors' shape."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens}
    return {"custom_id": row_id, "method": "POST", "url": BATCH_URL, "body": body}


def write_batch_requests(path: str | os.PathLike, requests: list[dict]) -> None:
    """One request per line, serialised as the authors' files are (``json.dumps`` defaults)."""
    with atomic_write(path) as handle:
        handle.writelines(json.dumps(request) + "\n" for request in requests)
