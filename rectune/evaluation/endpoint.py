"""Generation through an OpenAI-compatible endpoint: OpenAI, DeepSeek, a vLLM or SGLang server,
``transformers serve``.

Requests go through the official ``openai`` client, which retries 408/409/429/5xx answers, timeouts
and dropped connections with exponential backoff and jitter, honouring ``Retry-After``. What no retry
can fix (a wrong key, an unknown model, a server that rejects every request, retries used up) stops
the run at once with one line; the answers received so far stay in ``predictions.jsonl`` for a
rerun to resume from. The API key is read from the environment and never written anywhere.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlparse, urlsplit, urlunsplit

from tqdm.auto import tqdm

from rectune.core.io import RecTuneError
from rectune.core.secrets import redact_secrets, redact_url, url_secrets
from rectune.evaluation.endpoint_request import (
    TryCounter,
    UnusableAnswer,
    ask_once,
    backoff,
    bounded_transport,
    tries_text,
)
from rectune.evaluation.refused_parameters import (
    CHANGES,
    error_object,
    refused_parameter,
    refused_temperature,
    resendable,
    without_refused,
)
from rectune.models.generation import GenerationSettings

log = logging.getLogger(__name__)

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
BAD_REQUESTS_BEFORE_STOP = 3  # 400s with no success yet: the server rejects these requests as a whole


@dataclass
class Endpoint:
    """Where to send requests and how hard to try; none of it changes the answers."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 8
    timeout: float = 300.0  # seconds from sending a request to its last byte
    max_retries: int = 5
    client: Any = field(default=None, repr=False, compare=False)  # opened on first use by ask_one
    counter: TryCounter = field(default_factory=TryCounter, repr=False, compare=False)
    refused: set[str] = field(default_factory=set, repr=False, compare=False)  # by name; sent otherwise since
    verbose: bool = False  # log every HTTP request (credentials in URLs hidden)

    def __post_init__(self) -> None:
        """An address the client cannot send to is one line now: `localhost:8000/v1` (no scheme) failed every
        request as unreachable and said "rerun to resume"; `http://[::1` and a port past 65535 were tracebacks."""
        try:
            parts = urlsplit(self.base_url)
            _ = parts.port  # reading it checks it: a port that is no number, or past 65535, raises
        except ValueError as err:  # the URL is not echoed: it may hold credentials
            raise RecTuneError(f"--base-url: not a URL ({err})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RecTuneError(
                f"--base-url {redact_url(self.base_url)}: give an http:// or https:// address with a host, "
                "e.g. http://127.0.0.1:8000/v1"
            )

    def describe(self) -> str:
        return f"{self.model} at {redact_url(self.base_url)}"

    def secrets(self) -> list[str]:
        """What a server must not get to echo into RecTune's output: the API key and the URL's credentials."""
        return [os.environ.get(self.api_key_env) or "", *url_secrets(self.base_url)]

    def url_and_query(self) -> tuple[str, dict[str, str]]:
        """The base URL without its query, and the query's parameters (sent with every request, as the client's
        default query: the client appends request paths to the base URL, which a query would cut)."""
        parts = urlsplit(self.base_url)
        return urlunsplit(parts._replace(query="", fragment="")), dict(parse_qsl(parts.query))


HTTP_LOGGERS = ("httpx", "httpx2", "openai")


class _RedactedUrls(logging.Filter):
    """HTTP libraries log each request's URL: its credentials are hidden before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_url(str(a)) if "://" in str(a) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact_url(record.msg)
        return True


def quiet_http_logs(verbose: bool = False) -> None:
    """One log line per request would flood the progress bar: warnings only, unless ``verbose``."""
    for name in HTTP_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO if verbose else logging.WARNING)
        if not any(isinstance(f, _RedactedUrls) for f in logger.filters):
            logger.addFilter(_RedactedUrls())


def open_client(endpoint: Endpoint):
    """The ``openai`` client for ``endpoint``; a local server may run without a key."""
    import openai

    quiet_http_logs(endpoint.verbose)

    key = os.environ.get(endpoint.api_key_env)
    if not key:
        if urlparse(endpoint.base_url).hostname not in LOCAL_HOSTS:
            raise RecTuneError(
                f"no API key for {redact_url(endpoint.base_url)}: set {endpoint.api_key_env} (or name another "
                "variable with --api-key-env)"
            )
        key = "EMPTY"  # vLLM, SGLang and transformers serve accept any key unless started with one
    base_url, query = endpoint.url_and_query()
    return openai.OpenAI(
        base_url=base_url,
        default_query=query or None,
        api_key=key,
        timeout=endpoint.timeout,
        max_retries=endpoint.max_retries,
        http_client=openai.DefaultHttpxClient(
            event_hooks={"request": [endpoint.counter]},
            transport=bounded_transport(endpoint.counter, endpoint.timeout),
            follow_redirects=False,  # prompts go only where the user pointed, not where a server sends them
        ),
    )


def request_body(messages: list[dict], model: str, settings: GenerationSettings) -> dict:
    """The chat-completion request: greedy (temperature 0) unless sampling is asked for."""
    body: dict = {"model": model, "messages": messages, "max_tokens": settings.max_new_tokens, "seed": settings.seed}
    if settings.do_sample:
        body.update(temperature=settings.temperature, top_p=settings.top_p)
    else:
        body["temperature"] = 0.0
    if settings.stop:
        body["stop"] = list(settings.stop)
    if settings.chat_template_kwargs:  # servers that render templates take them (vLLM, SGLang, transformers serve)
        body["chat_template_kwargs"] = settings.chat_template_kwargs
    return body


def generate_endpoint(
    endpoint: Endpoint, prompts: list[list[dict]], settings: GenerationSettings, desc: str = "requests"
) -> Iterator[list[tuple[int, str, dict]]]:
    """Yield ``[(prompt index, answer, record)]`` as each answer arrives, ``concurrency`` requests in flight.

    ``record`` holds what the endpoint said: tokens, latency, finish reason, the model name it reports,
    a separate reasoning field; a request the server refused (400, 413, 422) has ``error`` instead.
    """
    client = open_client(endpoint)
    pool = ThreadPoolExecutor(max_workers=endpoint.concurrency)
    pending: dict[Future, int] = {}
    next_index, answered, bad_requests = 0, 0, 0
    try:
        with tqdm(total=len(prompts), desc=desc, unit="query") as progress:
            while next_index < len(prompts) or pending:
                while next_index < len(prompts) and len(pending) < endpoint.concurrency:
                    body = request_body(prompts[next_index], endpoint.model, settings)
                    pending[pool.submit(_result, client, body, endpoint)] = next_index
                    next_index += 1
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    index = pending.pop(future)
                    answer, record = future.result()
                    if "error" in record:
                        bad_requests += 1
                        if not answered and bad_requests >= BAD_REQUESTS_BEFORE_STOP:
                            raise RecTuneError(f"{endpoint.describe()}: every request refused: {record['error']}")
                    else:
                        answered += 1
                    progress.update(1)
                    yield [(index, answer, record)]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        client.close()  # requests still in flight after a stop end now, not after their timeouts and retries


def ask_one(endpoint: Endpoint, messages: list[dict], settings: GenerationSettings) -> tuple[str, dict]:
    """One answer, waited for (the builder's query rewriting); errors as in :func:`generate_endpoint`."""
    if endpoint.client is None:
        endpoint.client = open_client(endpoint)
    return _result(endpoint.client, request_body(messages, endpoint.model, settings), endpoint)


_REFUSED = (400, 413, 422)  # the server refuses this request (too long, malformed), not every request


def _result(client, body: dict, endpoint: Endpoint) -> tuple[str, dict]:
    """The answer, or a refused request's error record; anything no retry fixes is one line that stops the run.

    An unusable 200 answer is asked again, up to ``max_retries`` times in all, with backoff.
    """
    import httpx2 as httpx  # the openai client's HTTP library
    import openai

    endpoint.counter.reset()
    unusable = 0
    while True:
        body = without_refused(body, endpoint.refused)
        try:
            answer, record = ask_once(client, body, endpoint.counter, endpoint.timeout)
            if endpoint.refused:
                record["request_changes"] = [CHANGES[parameter] for parameter in sorted(endpoint.refused)]
            return answer, record
        except UnusableAnswer as err:
            unusable += 1
            if unusable > endpoint.max_retries:
                raise RecTuneError(
                    f"{endpoint.describe()}: {err} after {tries_text(endpoint.counter.tries)}; "
                    "the answers so far are kept: rerun to resume"
                ) from None
            time.sleep(backoff(unusable))
        except openai.APIStatusError as err:
            tries = tries_text(endpoint.counter.tries)
            parameter = refused_parameter(err.body) if err.status_code in (400, 422) else None
            if parameter and resendable(body, parameter) is not None:
                if parameter not in endpoint.refused:
                    log.warning("%s refuses %s: %s from now on", endpoint.model, parameter, CHANGES[parameter])
                endpoint.refused.add(parameter)
                continue
            if err.status_code == 400 and refused_temperature(err.body):
                raise RecTuneError(
                    f"{endpoint.describe()}: refuses temperature {body.get('temperature')}: {_message(err, endpoint)} "
                    "(a model that samples only at temperature 1, as OpenAI's reasoning models do, is scored by "
                    "evaluate/run.py --do-sample --temperature 1)"
                ) from None
            if err.status_code in _REFUSED:
                return "", {"error": f"{err.status_code}: {_message(err, endpoint)}"}
            if err.status_code in (401, 403):
                raise RecTuneError(
                    f"{redact_url(endpoint.base_url)}: {err.status_code} {_message(err, endpoint)} (check the key in "
                    f"{endpoint.api_key_env})"
                ) from None
            if 300 <= err.status_code < 400:
                location = redact_secrets(err.response.headers.get("Location", "nowhere"), endpoint.secrets())[:200]
                raise RecTuneError(
                    f"{endpoint.describe()}: {err.status_code} redirects to {location!r}; prompts go only to "
                    "--base-url: give that address if you trust it"
                ) from None
            if err.status_code == 404:
                raise RecTuneError(
                    f"{endpoint.describe()}: 404 {_message(err, endpoint)} (is the model name right?)"
                ) from None
            raise RecTuneError(
                f"{endpoint.describe()}: {err.status_code} {_message(err, endpoint)} after {tries}; "
                "the answers so far are kept: rerun to resume"
            ) from None
        except (openai.APITimeoutError, openai.APIConnectionError, httpx.TransportError) as err:
            # an error's body read past the deadline or the cap surfaces as httpx's own error, unwrapped
            cause = err.__cause__ if isinstance(err, openai.APIError) else err
            text = redact_secrets(" ".join(str(cause).split()), endpoint.secrets())
            detail = f" ({text[:200]})" if isinstance(cause, httpx.TransportError) else ""
            raise RecTuneError(
                f"{endpoint.describe()}: {err.__class__.__name__.removeprefix('API')}{detail} after "
                f"{tries_text(endpoint.counter.tries)}; the answers so far are kept: rerun to resume"
            ) from None


def _message(err, endpoint: Endpoint) -> str:
    """The server's own error message (OpenAI's ``{"error": {"message"}}``, a bare ``{"message"}`` or Google's list of
    one), one line, with any credential it echoes hidden."""
    message = error_object(err.body).get("message") or err.message
    return redact_secrets(" ".join(str(message).split()), endpoint.secrets())[:300]


def endpoint_usage(predictions: Path, ids: set[str]) -> dict | None:
    """Totals of what the endpoint reported for ``ids`` (None when the predictions came from elsewhere)."""
    records = []
    with predictions.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row.get("id") in ids and "latency_s" in row:
                records.append(row)
    if not records:
        return None
    prompt = sum(r["prompt_tokens"] or 0 for r in records)
    completion = sum(r["completion_tokens"] or 0 for r in records)
    latencies = sorted(r["latency_s"] for r in records)
    span = max(r["finished_at"] for r in records) - min(r["finished_at"] - r["latency_s"] for r in records)
    finish: dict[str, int] = {}
    for record in records:
        finish[str(record["finish_reason"])] = finish.get(str(record["finish_reason"]), 0) + 1
    return {
        "answers": len(records),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "latency_s_mean": round(statistics.fmean(latencies), 3),
        "latency_s_p95": latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))],
        "wall_s": round(span, 3),  # first request sent to last answer received (a resumed run counts its gap)
        "queries_per_s": round(len(records) / span, 3) if span > 0 else None,
        "completion_tokens_per_s": round(completion / span, 2) if span > 0 else None,
        "finish_reasons": dict(sorted(finish.items())),
        "served_models": sorted({str(r["served_model"]) for r in records}),
        "with_reasoning": sum(1 for r in records if r.get("reasoning")),
        "request_changes": sorted({change for r in records for change in r.get("request_changes", [])}),
    }
