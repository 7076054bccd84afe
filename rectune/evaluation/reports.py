"""Generate with a checkpoint on held-out rows, resumably, then score and report.

Outputs in the report folder:

* ``predictions.jsonl`` — ``{"id", "completion"}`` rows, appended and flushed batch by batch;
  a rerun skips the ids already there (a line cut by an interruption is dropped and redone);
* ``report.json`` — the scorer's report plus the run's configuration;
* ``report.md`` — the per-task table;
* ``details.jsonl`` — one record per query (per PerRecBench row): the question, the answer, what it
  resolved to (titles, items, a rating) beside the ground truth, and the query's scores;
* ``config.json`` — checkpoint, base model, data, prompt variant, generation settings, commit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path

from rectune.benchmarks import Resources, get_benchmark, load_rows
from rectune.core.io import DataError, RecTuneError, atomic_write, fault_point, read_json, write_json, write_jsonl
from rectune.core.outputs import claim_output, write_marker
from rectune.data.completions import DEFAULT_LIMITS, CompletionLimits
from rectune.evaluation.answer_files import batch_request, resolve_ids, write_batch_requests
from rectune.evaluation.endpoint import endpoint_usage
from rectune.evaluation.sampling import stratified_sample
from rectune.evaluation.scoring import check_coverage, score_benchmark
from rectune.models.checkpoints import Checkpoint, finished_stage, wandb_run_record
from rectune.models.generation import GenerationSettings

log = logging.getLogger(__name__)


def prompt_variant(data: str | os.PathLike, with_history: bool | None, k: int | None) -> dict:
    """The prompt settings: as given, else as data_prep recorded them for the training files (grounded
    prompts, ``candidates``, only ever as recorded: the candidates live in the rows)."""
    recorded = {}
    stats = Path(data).parent / "stats.json"
    if stats.is_file():
        recorded = read_json(stats).get("prompt", {})
    return {
        **recorded,
        "with_history": recorded.get("with_history", False) if with_history is None else with_history,
        "k": recorded.get("k") if k is None else k,
    }


def read_finished(path: Path, known_ids: set[str]) -> dict[str, str]:
    """Predictions already written; damaged lines are skipped, reported and removed from the file.

    A line is damaged when it was cut by an interruption (no newline), is not JSON, or is not a
    ``{"id", "completion"}`` object: its query is generated again. A well-formed prediction for an
    id that is not in the data means the file belongs to other data, and is refused.
    """
    if not path.is_file():
        return {}
    finished: dict[str, str] = {}
    kept: list[bytes] = []
    damaged: list[int] = []
    refused = 0
    with path.open("rb") as handle:
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
) -> dict[str, str]:
    """Generate what is missing, appending each batch to ``predictions_path`` as it finishes.

    ``known_ids`` are every id of the data (``rows`` may be its first N): predictions for them are kept.
    ``generate_batches`` gets the prompts of the rows to do, or the rows themselves when ``from_rows``
    (a baseline answers from a row's fields, not from a prompt).
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
    with predictions_path.open("a", encoding="utf-8") as handle:
        for batch in generate_batches(inputs):
            for index, completion, *record in batch:  # an endpoint adds what it reported (tokens, latency)
                row_id = todo[index].id
                finished[row_id] = completion
                line = {"id": row_id, "completion": completion, **(record[0] if record else {})}
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
            fault_point("eval:batch")
    return finished


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


def evaluate_checkpoint(
    checkpoint: Checkpoint,
    data: str | os.PathLike,
    out: str | os.PathLike,
    generate_batches,
    variant: dict,
    settings: GenerationSettings,
    *,
    catalog: str | None = None,
    kg: str | None = None,
    limit: int | None = None,
    sample: int | None = None,
    commit: str = "unknown",
    overwrite: bool = False,
    limits: CompletionLimits = DEFAULT_LIMITS,
    answers: tuple[str, dict[str, str]] | None = None,
    convention: str = "default",
    score_failures_as_empty: bool = False,
    tasks: list[str] | None = None,
    baseline: dict | None = None,
    from_rows: bool = False,
) -> tuple[dict, list[dict]]:
    """Generate (resuming), score and write the report folder ``out``.

    ``out`` must be new, empty or an earlier report folder; predictions already in it are reused only
    when the same checkpoint, data, prompt and generation settings made them, else this refuses.
    ``overwrite`` starts afresh (removing only the files evaluation writes). ``answers`` (the file
    they came from, and row id -> text, e.g. a batch output file) stand in for generation. Requests an
    endpoint refused stop the run before scoring unless ``score_failures_as_empty``. ``tasks`` keeps
    only rows of those tasks (before ``limit``); ``sample`` then draws that many units stratified by
    task (:mod:`rectune.evaluation.sampling`, seeded by the generation seed); ``baseline`` is a
    baseline's fitting record, kept in the report; ``from_rows``: see :func:`run_generation`.
    """
    out = Path(out)
    data_rows = all_rows = load_rows(data)
    known = {r.id for r in all_rows}
    if tasks is not None:
        unknown = sorted(set(tasks) - {r.task for r in all_rows})
        if unknown:
            raise DataError(data, f"no rows of task {', '.join(unknown)} (tasks here: "
                            f"{', '.join(sorted({r.task for r in all_rows}))})")  # fmt: skip
        all_rows = [r for r in all_rows if r.task in tasks]
    rows = all_rows[:limit] if limit is not None else all_rows
    if sample is not None:
        rows = stratified_sample(rows, sample, settings.seed)
    config = start_report_folder(out, checkpoint, data, len(rows), variant, settings, commit, overwrite)
    failed: dict[str, str] = {}
    if answers is None:
        predictions = run_generation(rows, out / "predictions.jsonl", generate_batches, variant, known, from_rows)
        failed = failed_requests(out / "predictions.jsonl", {r.id for r in rows})
        if failed and not score_failures_as_empty:
            reasons = sorted(set(failed.values()))
            raise RecTuneError(
                f"{len(failed)} of {len(rows)} requests failed: {reasons[0]}"
                + (f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else "")
                + "; nothing was scored: rerun to ask them again, or pass --score-failures-as-empty to score them "
                "as empty answers"
            )
    else:
        predictions = record_answers(rows, data_rows, answers[1], answers[0], out / "predictions.jsonl")
    resources = Resources(data, catalog, kg, limits=limits, convention=convention, top_k=variant.get("k"))
    report, table = score_benchmark(rows, predictions, resources)
    report["config"] = config
    if baseline is not None:
        report["baseline"] = baseline
    if checkpoint.kind == "openai":
        report["endpoint"] = endpoint_usage(out / "predictions.jsonl", {r.id for r in rows})
        report["failed_requests"] = len(failed)  # scored as empty answers (--score-failures-as-empty)
    write_json(out / "report.json", report, line_per_item=("per_query",))
    write_jsonl(out / "details.jsonl", table)  # per query: what was asked, answered, resolved and scored
    with atomic_write(out / "report.md") as handle:
        handle.write(f"# {out.name}\n\ncheckpoint `{checkpoint.path}` on `{data}` ({len(rows)} queries)\n\n")
        handle.write(report["table"] + "\n")
    seal_report_folder(out)
    return report, table


def start_report_folder(
    out: Path, checkpoint: Checkpoint, data, queries: int, variant: dict, settings, commit: str, overwrite: bool
) -> dict:
    """Claim ``out`` for this run and write its ``config.json``; returns the config."""
    key = predictions_key(checkpoint, data, variant, settings)
    claim_report_folder(out, key, overwrite)
    config = {
        **checkpoint.describe(),
        "data": str(data),
        "queries": queries,
        "prompt": variant,
        "generation": asdict(settings),
        "predictions_key": key,
        "trained_by": training_run(checkpoint),
        "git_commit": commit,
    }
    write_json(out / "config.json", config)
    return config


def record_answers(rows: list, all_rows: list, answers: dict[str, str], source: str, path: Path) -> dict[str, str]:
    """Write the answers (read from ``source``) of ``rows`` as ``predictions.jsonl``; each row needs one."""
    answers = resolve_ids(answers, all_rows, source, task=None)
    check_coverage(all_rows, answers, source, allow_subset=True)  # answers to other data are refused
    ids = {row.id for row in rows}
    check_coverage(rows, {k: v for k, v in answers.items() if k in ids}, source, allow_subset=False)
    predictions = {row.id: answers[row.id] for row in rows}
    with atomic_write(path) as handle:
        handle.writelines(
            json.dumps({"id": row_id, "completion": text}, ensure_ascii=False) + "\n"
            for row_id, text in predictions.items()
        )
    return predictions


def write_batch_file(
    checkpoint: Checkpoint,
    data: str | os.PathLike,
    out: str | os.PathLike,
    variant: dict,
    settings,
    *,
    limit: int | None = None,
    overwrite: bool = False,
    commit: str = "unknown",
) -> Path:
    """The OpenAI Batch requests for the rows, in the RecBench+ authors' shape, as ``out/batch_requests.jsonl``."""
    out = Path(out)
    rows = load_rows(data)[:limit] if limit is not None else load_rows(data)
    start_report_folder(out, checkpoint, data, len(rows), variant, settings, commit, overwrite)
    benchmark = get_benchmark(rows[0].benchmark if rows else None)
    requests = [
        batch_request(row.id, benchmark.messages(row, variant), checkpoint.base_model, settings.max_new_tokens)
        for row in rows
    ]
    if settings.do_sample:
        for request in requests:
            request["body"].update(temperature=settings.temperature, top_p=settings.top_p, seed=settings.seed)
    write_batch_requests(out / "batch_requests.jsonl", requests)
    seal_report_folder(out)
    return out / "batch_requests.jsonl"


def training_run(checkpoint: Checkpoint) -> dict | None:
    """The training stage that produced the checkpoint's adapter: recipe, stage, W&B run (when recorded)."""
    if not checkpoint.adapter:
        return None
    folder = Path(checkpoint.adapter)
    finished = finished_stage(folder) or {}
    wandb_run = wandb_run_record(folder)
    if not finished and not wandb_run:
        return None
    return {"recipe": finished.get("recipe"), "stage": finished.get("stage"), "wandb_run": wandb_run or None}


REPORT_KIND = "eval report"
REPORT_FILES = ("config.json", "predictions.jsonl", "report.json", "report.md", "details.jsonl", "batch_requests.jsonl")
REPORT_ENTRIES = [*REPORT_FILES, "wandb"]


def predictions_key(
    checkpoint: Checkpoint, data: str | os.PathLike, variant: dict, settings: GenerationSettings
) -> dict:
    """What the predictions depend on: the checkpoint's weights, the data, the prompt and the decoding.

    The batch size is left out: it changes only the order of generation.
    """
    generation = {k: v for k, v in asdict(settings).items() if k != "batch_size" and not (k == "stop" and not v)}
    data_hash = hashlib.sha256(Path(data).read_bytes()).hexdigest()
    return {"model": checkpoint.identity(), "data_sha256": data_hash, "prompt": variant, "generation": generation}


def claim_report_folder(out: Path, key: dict, overwrite: bool) -> None:
    """Check ``out`` may hold this evaluation's report, and mark it as a report folder.

    Refuses a folder with files evaluation did not write, and predictions made with another key.
    """
    claim_output(out, REPORT_KIND, overwrite=overwrite)
    if overwrite:
        for name in REPORT_FILES:
            (out / name).unlink(missing_ok=True)
    predictions = out / "predictions.jsonl"
    if predictions.is_file() and predictions.stat().st_size:
        config = out / "config.json"
        recorded = read_json(config).get("predictions_key") if config.is_file() else None
        if recorded != key:
            changed = sorted(k for k in key if not recorded or recorded.get(k) != key[k])
            raise RecTuneError(
                f"{predictions}: made with a different {', '.join(changed)} than this run; pass --overwrite to "
                "generate afresh, or choose another --out"
            )
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, REPORT_KIND, REPORT_ENTRIES, hashed=[])


def seal_report_folder(out: Path) -> None:
    """Record the report files as written, so a rerun refuses a folder whose files changed since."""
    write_marker(out, REPORT_KIND, REPORT_ENTRIES, hashed=[name for name in REPORT_FILES if (out / name).is_file()])
