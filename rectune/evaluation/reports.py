"""Generate with a checkpoint on held-out rows, resumably, then score and report.

Outputs in the report folder:

* ``predictions.jsonl`` — ``{"id", "completion"}`` rows (generated ones also ``"finish_reason"``), appended and
  flushed batch by batch; a rerun skips the ids already there (:mod:`rectune.evaluation.predictions`);
* ``report.json`` — the scorer's report plus the run's configuration;
* ``report.md`` — the per-task table;
* ``details.jsonl`` — one record per query (per PerRecBench row): the question, the answer, what it
  resolved to (titles, items, a rating) beside the ground truth, and the query's scores;
* ``config.json`` — checkpoint, base model, data, prompt variant, generation settings, commit.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from rectune.benchmarks import Resources, get_benchmark, load_rows
from rectune.core.escaping import markdown_text
from rectune.core.io import DataError, RecTuneError, atomic_write, json_line, read_json, write_json, write_jsonl
from rectune.core.outputs import MARKER, claim_output, write_marker
from rectune.data.completions import DEFAULT_LIMITS, CompletionLimits
from rectune.evaluation.answer_files import (
    Answers,
    batch_request,
    check_failures,
    resolve_ids,
    write_batch_requests,
)
from rectune.evaluation.endpoint import endpoint_usage
from rectune.evaluation.predictions import answers_at_token_limit, failed_requests, run_generation
from rectune.evaluation.sampling import selection_record, selection_text, stratified_sample
from rectune.evaluation.scoring import check_coverage, score_benchmark
from rectune.evaluation.tracking import LOGGED
from rectune.models.checkpoints import Checkpoint, finished_stage, wandb_run_record
from rectune.models.generation import GenerationSettings

log = logging.getLogger(__name__)


def selected_rows(
    data_rows: list, data: str | os.PathLike, tasks: list[str] | None, limit: int | None, sample: int | None, seed: int
) -> tuple[list, list]:
    """The rows of ``tasks`` (all when None), and of those the ones scored: the first ``limit``, then ``sample``
    of them drawn stratified by task (:mod:`rectune.evaluation.sampling`, seeded)."""
    if tasks is not None:
        unknown = sorted(set(tasks) - {r.task for r in data_rows})
        if unknown:
            raise DataError(data, f"no rows of task {', '.join(unknown)} (tasks here: "
                            f"{', '.join(sorted({r.task for r in data_rows}))})")  # fmt: skip
        data_rows = [r for r in data_rows if r.task in tasks]
    rows = data_rows[:limit] if limit is not None else data_rows
    if sample is not None:
        rows = stratified_sample(rows, sample, seed)
    return data_rows, rows


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
    answers: tuple[str, Answers] | None = None,
    convention: str = "default",
    score_failures_as_empty: bool = False,
    tasks: list[str] | None = None,
    answered_tasks: list[str] | None = None,
    baseline: dict | None = None,
    from_rows: bool = False,
) -> tuple[dict, list[dict]]:
    """Generate (resuming), score and write the report folder ``out``.

    ``out`` must be new, empty or an earlier report folder; predictions already in it are reused only
    when the same checkpoint, data, prompt and generation settings made them, else this refuses.
    ``overwrite`` starts afresh (removing only the files evaluation writes). ``answers`` (the file
    they came from and what :func:`load_answers` read in it, e.g. a batch output file) stand in for
    generation. Requests an endpoint refused stop the run before scoring unless ``score_failures_as_empty``.
    ``tasks`` keeps only rows of those tasks (before ``limit``); ``sample`` then draws that many units
    stratified by task (:mod:`rectune.evaluation.sampling`, seeded by the generation seed); ``answered_tasks`` (a
    baseline that answers some tasks only) keeps the rows of those tasks after the limit or sample, so its
    queries are the ones a checkpoint run with the same arguments scores; ``baseline`` is a
    baseline's fitting record, kept in the report; ``from_rows``: see :func:`run_generation`.
    """
    out = Path(out)
    data_rows = load_rows(data)
    known = {r.id for r in data_rows}
    all_rows, rows = selected_rows(data_rows, data, tasks, limit, sample, settings.seed)
    if answered_tasks is not None:
        rows = [r for r in rows if r.task in answered_tasks]
        if not rows:
            answered = ", ".join(answered_tasks)
            raise DataError(data, f"none of the queries chosen is of a task answered here ({answered})")
    selection = selection_record(tasks, limit, sample, settings.seed)
    resources = Resources(
        data, catalog, kg, limits=limits, convention=convention, top_k=variant.get("k"), variant=variant
    )
    get_benchmark(rows[0].benchmark if rows else None).load_scoring_files({r.task for r in rows}, resources)
    with _left_as_found_until_answered(out):
        config = start_report_folder(out, checkpoint, data, len(rows), variant, settings, commit, overwrite, selection)
        if answers is None:
            predictions = run_generation(
                rows, out / "predictions.jsonl", generate_batches, variant, known, from_rows, source=data
            )
        else:  # an answer file that misses a query, or holds failures, is refused before anything is written
            predictions, failed = record_answers(
                rows, data_rows, answers, out / "predictions.jsonl", score_failures_as_empty
            )
    if answers is None:
        failed = failed_requests(out / "predictions.jsonl", {r.id for r in rows})
        check_failures(failed, len(rows), "requests", as_empty=score_failures_as_empty)
    report, table = score_benchmark(rows, predictions, resources)
    cut = answers_at_token_limit(out / "predictions.jsonl", {r.id for r in rows})
    report["completions"]["cut_at_max_new_tokens"] = cut
    # an answer file's requests may have asked for another limit than these settings
    cut_text = token_limit_text(cut, len(rows), settings.max_new_tokens if answers is None else None)
    if cut_text:
        log.warning("%s: %s", out, cut_text)
    report["config"] = config
    if baseline is not None:
        report["baseline"] = baseline
    if checkpoint.kind == "openai":
        report["endpoint"] = endpoint_usage(out / "predictions.jsonl", {r.id for r in rows})
    if checkpoint.kind == "openai" or answers is not None:
        report["failed_requests"] = len(failed)  # scored as empty answers (--score-failures-as-empty)
    write_json(out / "report.json", report, line_per_item=("per_query",))
    write_jsonl(out / "details.jsonl", table)  # per query: what was asked, answered, resolved and scored
    with atomic_write(out / "report.md") as handle:
        heading, path, source = (markdown_text(x) for x in (out.name, checkpoint.path, data))
        chosen = selection_text(selection)
        chosen = markdown_text(f": {chosen}") if chosen else ""
        handle.write(f"# {heading}\n\ncheckpoint {path} on {source} ({len(rows)} queries{chosen})\n\n")
        handle.write(report["table"] + "\n")
        if cut_text:
            handle.write(f"\n{cut_text}\n")
    seal_report_folder(out)
    return report, table


def token_limit_text(cut: int | None, answers: int, max_new_tokens: int | None) -> str | None:
    """The warning for answers that ran out of new tokens (``max_new_tokens``: their limit, None where not
    known here): what they lack (a last title, a rating) is scored as missing."""
    if not cut:
        return None
    tokens = f"all {max_new_tokens} new tokens" if max_new_tokens is not None else 'their token limit ("length")'
    return (
        f"{cut} of {answers} answers used {tokens} and may be cut short: "
        "scores count what was written, so raise --max-new-tokens"
    )


def start_report_folder(
    out: Path,
    checkpoint: Checkpoint,
    data,
    queries: int,
    variant: dict,
    settings,
    commit: str,
    overwrite: bool,
    selection: dict,
) -> dict:
    """Claim ``out`` for this run and write its ``config.json`` (``selection``: :func:`selection_record`);
    returns the config."""
    key = predictions_key(checkpoint, data, variant, settings)
    claim_report_folder(out, key, overwrite)
    config = {
        **checkpoint.describe(),
        "data": str(data),
        "queries": queries,
        "selection": selection,
        "prompt": variant,
        "generation": asdict(settings),
        "predictions_key": key,
        "trained_by": training_run(checkpoint),
        "git_commit": commit,
    }
    write_json(out / "config.json", config)
    return config


def record_answers(
    rows: list, all_rows: list, answers: tuple[str, Answers], path: Path, as_empty: bool
) -> tuple[dict[str, str], dict[str, str]]:
    """Write the answers of ``rows`` (``answers``: their file and what it holds) as ``predictions.jsonl``, with
    the finish reasons the file records: each row needs an answer, and failed requests stop here unless
    ``as_empty``. Returns the predictions and the failures among ``rows``."""
    source, (texts, failures, finish_reasons) = answers
    texts = resolve_ids(texts, all_rows, source, task=None)
    check_coverage(all_rows, texts, source, allow_subset=True)  # answers to other data are refused
    ids = {row.id for row in rows}
    check_coverage(rows, {k: v for k, v in texts.items() if k in ids}, source, allow_subset=False)
    failed = {k: v for k, v in resolve_ids(failures, all_rows, source, task=None).items() if k in ids}
    check_failures(failed, len(rows), "answers", as_empty=as_empty, source=source)
    predictions = {row.id: texts[row.id] for row in rows}
    finished = resolve_ids(finish_reasons, all_rows, source, task=None)
    with atomic_write(path) as handle:
        for row_id, text in predictions.items():
            reason = {"finish_reason": finished[row_id]} if row_id in finished else {}
            handle.write(json_line({"id": row_id, "completion": text, **reason}))
    return predictions, failed


def write_batch_file(
    checkpoint: Checkpoint,
    data: str | os.PathLike,
    out: str | os.PathLike,
    variant: dict,
    settings,
    *,
    limit: int | None = None,
    sample: int | None = None,
    tasks: list[str] | None = None,
    overwrite: bool = False,
    commit: str = "unknown",
    catalog: str | os.PathLike | None = None,
    kg: str | os.PathLike | None = None,
) -> Path:
    """The OpenAI Batch requests for the rows :func:`selected_rows` chooses (the queries a local evaluation
    with the same arguments scores), in the RecBench+ authors' shape, as ``out/batch_requests.jsonl``; the
    files scoring their answers will read (``catalog``, ``kg``: default beside ``data``) are checked first."""
    out = Path(out)
    _, rows = selected_rows(load_rows(data), data, tasks, limit, sample, settings.seed)
    selection = selection_record(tasks, limit, sample, settings.seed)
    benchmark = get_benchmark(rows[0].benchmark if rows else None)
    benchmark.load_scoring_files({row.task for row in rows}, Resources(data, catalog, kg, variant=variant))
    with _left_as_found_until_answered(out):
        start_report_folder(out, checkpoint, data, len(rows), variant, settings, commit, overwrite, selection)
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
    recipe, stage = (finished.get(key) if isinstance(finished.get(key), str) else None for key in ("recipe", "stage"))
    return {"recipe": recipe, "stage": stage, "wandb_run": wandb_run or None}


REPORT_KIND = "eval report"
REPORT_FILES = ("config.json", "predictions.jsonl", "report.json", "report.md", "details.jsonl", "batch_requests.jsonl")
REPORT_ENTRIES = [*REPORT_FILES, "wandb", LOGGED]
OPTIONAL_SETTINGS = ("stop", "chat_template_kwargs", "engine")


def predictions_key(
    checkpoint: Checkpoint, data: str | os.PathLike, variant: dict, settings: GenerationSettings
) -> dict:
    """What the predictions depend on: the checkpoint's weights, the data, the prompt and the decoding (vLLM's
    included: its kernels' greedy answers are not transformers', so a report resumed with the other backend would
    mix the two).

    The batch size is left out: it changes only the order of generation.
    """
    generation = {  # settings left unset keep the keys of reports written before they existed
        k: v for k, v in asdict(settings).items() if k != "batch_size" and not (k in OPTIONAL_SETTINGS and not v)
    }
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


@contextmanager
def _left_as_found_until_answered(out: Path) -> Iterator[None]:
    """A report folder this run finds empty or makes is left as it was found if the run stops before an answer is
    written (prompts past the model's positions, an answer file that misses a query): one it made is removed."""
    made = not out.exists()
    found_empty = made or (out.is_dir() and not any(out.iterdir()))
    try:
        yield
    except BaseException:
        if found_empty:
            _drop_unused(out, made)
        raise


def _drop_unused(out: Path, made: bool) -> None:
    try:
        names, predictions = {entry.name for entry in out.iterdir()}, out / "predictions.jsonl"
        answered = predictions.is_file() and predictions.stat().st_size > 0
        if names <= {MARKER, "config.json", predictions.name} and not answered:
            for name in names:
                (out / name).unlink()
            if made:
                out.rmdir()
    except OSError:
        return  # written or removed meanwhile: what is there stays


def seal_report_folder(out: Path) -> None:
    """Record the report files as written, so a rerun refuses a folder whose files changed since."""
    write_marker(out, REPORT_KIND, REPORT_ENTRIES, hashed=[name for name in REPORT_FILES if (out / name).is_file()])
