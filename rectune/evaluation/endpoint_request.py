"""One chat-completion request to a server we do not trust: bounded in time and size, checked, counted.

The ``openai`` client retries what HTTP says is worth retrying (408/409/429/5xx, timeouts, dropped
connections, with backoff and ``Retry-After``). What it cannot see is handled here: a 200 whose body is
not a chat completion (not JSON, ``choices`` empty or missing, an HTML page) is retried like a 5xx; an
answer still arriving when ``timeout`` seconds have passed since its request was sent is cut off (a
server dripping bytes would otherwise hold the run for ever); a body over :data:`MAX_ANSWER_BYTES` is
refused. Every attempt sent is counted, so messages say how many tries were made.
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

from rectune.core.io import whole_characters

MAX_ANSWER_BYTES = 1 << 20  # a 2,000-token completion is ~10 KB; a body far larger is not an answer


HEADER_BYTES = 1 << 20  # room for headers, and for the read past the body's own cap that read_body refuses


class UnusableAnswer(Exception):
    """A 200 answer that is no chat completion, or one cut off by the deadline or the size cap."""


class OversizedAnswer(Exception):
    """An answer, of any status, larger than the cap."""


class TryCounter:
    """Counts the HTTP attempts each thread sends (an ``httpx`` request hook), when the last one left and the
    bytes its answer has brought so far."""

    def __init__(self) -> None:
        self._local = threading.local()

    def reset(self) -> None:
        self._local.tries, self._local.sent_at, self._local.received = 0, time.monotonic(), 0

    def __call__(self, request: Any) -> None:
        self._local.tries = getattr(self._local, "tries", 0) + 1
        self._local.sent_at, self._local.received = time.monotonic(), 0

    def receive(self, size: int) -> None:
        """Count ``size`` more bytes of the current answer: past the cap (headers allowed for) is an error."""
        self._local.received = getattr(self._local, "received", 0) + size
        if self._local.received > MAX_ANSWER_BYTES + HEADER_BYTES:
            raise OversizedAnswer(f"an answer over {MAX_ANSWER_BYTES >> 20} MiB")

    @property
    def tries(self) -> int:
        return getattr(self._local, "tries", 0)

    @property
    def sent_at(self) -> float:
        return getattr(self._local, "sent_at", time.monotonic())


def bounded_transport(counter: TryCounter, timeout: float) -> Any:
    """An ``httpx`` transport whose every read and write, headers and error bodies included, ends by the
    request's deadline (``timeout`` seconds after it was sent) and whose answers stop at the size cap,
    uncompressed: it asks for no compression and refuses an answer that comes compressed anyway.

    ``httpx`` bounds each read only (a server dripping a byte a second never times out) and the ``openai``
    client reads an error's whole body; the bound is put on the connection's network stream.
    """
    import httpcore2 as httpcore  # the openai client's own HTTP stack (httpx2 over httpcore2)
    import httpx2 as httpx

    class Stream(httpcore.NetworkStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def _left(self, timeout: float | None) -> float:
            left = counter.sent_at + timeout_s - time.monotonic()
            if left <= 0:
                raise httpcore.ReadTimeout("no complete answer before --request-timeout")
            return left if timeout is None else min(timeout, left)

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            data = self._inner.read(max_bytes, self._left(timeout))
            try:
                counter.receive(len(data))
            except OversizedAnswer as err:
                raise httpcore.ReadError(str(err)) from None
            return data

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self._inner.write(buffer, self._left(timeout))

        def close(self) -> None:
            self._inner.close()

        def start_tls(self, *args: Any, **kwargs: Any) -> Any:
            return Stream(self._inner.start_tls(*args, **kwargs))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class Backend(httpcore.SyncBackend):
        def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
            return Stream(super().connect_tcp(*args, **kwargs))

        def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
            return Stream(super().connect_unix_socket(*args, **kwargs))

    class Transport(httpx.HTTPTransport):
        def handle_request(self, request: Any) -> Any:
            # the size cap counts bytes on the wire: a gzip body of 1 MiB inflates to 1 GiB when read
            request.headers["Accept-Encoding"] = "identity"
            response = super().handle_request(request)
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                response.close()
                raise httpx.RemoteProtocolError(
                    f"a compressed answer (Content-Encoding: {encoding[:40]}) where none was asked for", request=request
                )
            return response

    timeout_s = timeout
    transport = Transport()
    transport._pool._network_backend = Backend()  # httpx takes no backend argument; its pool keeps one here
    return transport


def tries_text(tries: int) -> str:
    return f"{tries} {'try' if tries == 1 else 'tries'}"


# Request fields OpenAI's client has no parameter for, which servers that render chat templates read
BEYOND_OPENAI = ("chat_template_kwargs",)


def ask_once(client: Any, body: dict, counter: TryCounter, timeout: float) -> tuple[str, dict]:
    """Send ``body`` (the client retrying HTTP failures) and read the answer within the deadline and cap."""
    given = {key: value for key, value in body.items() if key not in BEYOND_OPENAI}
    extra = {key: body[key] for key in BEYOND_OPENAI if key in body} or None  # sent in the body as they are
    start = time.perf_counter()
    with client.chat.completions.with_streaming_response.create(**given, extra_body=extra) as response:
        raw = read_body(response.http_response, counter.sent_at + timeout)
    latency = time.perf_counter() - start
    return parse_completion(raw, latency)


def read_body(http_response: Any, deadline: float) -> bytes:
    """The response body, cut off at ``deadline`` (``time.monotonic()``) or past :data:`MAX_ANSWER_BYTES`
    (the transport's stream ends a read blocked past the deadline: :func:`bounded_transport`)."""
    chunks, size = [], 0
    try:
        for chunk in http_response.iter_bytes():
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise UnusableAnswer(f"an answer over {MAX_ANSWER_BYTES >> 20} MiB")
            if time.monotonic() > deadline:
                raise UnusableAnswer("no complete answer before --request-timeout")
            chunks.append(chunk)
    except UnusableAnswer:
        raise
    except Exception as err:  # the deadline passed mid-read, or the server hung up mid-answer
        reason = "no complete answer before --request-timeout" if time.monotonic() >= deadline else "answer cut off"
        raise UnusableAnswer(f"{reason} ({type(err).__name__})") from None
    return b"".join(chunks)


def parse_completion(raw: bytes, latency: float) -> tuple[str, dict]:
    """The answer text and what the server reported, from a chat-completion body; else :class:`UnusableAnswer`."""
    try:
        response = whole_characters(json.loads(raw.decode("utf-8")))  # a lone "\\udcff" would fail every write
    except (UnicodeDecodeError, ValueError, RecursionError):  # ValueError: also a number past the digit limit
        start = raw[:40].decode("utf-8", "replace").strip()
        raise UnusableAnswer(f"not JSON (starts {' '.join(start.split())!r})") from None
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not choices:
        raise UnusableAnswer(f"no choices (choices: {json.dumps(choices)[:40]})")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    content = content_text(message.get("content")) if isinstance(message, dict) else None
    if content is None:
        raise UnusableAnswer("choices[0] holds no message with text content")
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    record = {
        "prompt_tokens": _count(usage.get("prompt_tokens")),
        "completion_tokens": _count(usage.get("completion_tokens")),
        "latency_s": round(latency, 3),
        "finished_at": round(time.time(), 3),
        "finish_reason": _short(choice.get("finish_reason")),
        "served_model": _short(response.get("model")),
    }
    reasoning = message.get("reasoning_content") or message.get("reasoning") or content[1]
    if isinstance(reasoning, str) and reasoning:
        record["reasoning"] = reasoning  # kept beside the answer, never scored
    return content[0], record


def content_text(content: Any) -> tuple[str, str] | None:
    """(answer, reasoning) of a message's ``content``: a string, null (no text: a refusal, reasoning alone) or a
    list of parts, as Mistral's reasoning models send it (``{"type": "thinking", "thinking": [text parts]}``,
    then ``{"type": "text", "text": ...}``); None when it is none of these, or parts of no kind it knows."""
    if content is None or isinstance(content, str):
        return content or "", ""
    if not isinstance(content, list):
        return None
    answer, reasoning, known = [], [], not content
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            answer.append(part["text"])
        elif kind == "thinking" and isinstance(part.get("thinking"), (str, list)):
            inner = part["thinking"]
            inner = [inner] if isinstance(inner, str) else [i.get("text") for i in inner if isinstance(i, dict)]
            reasoning.extend(text for text in inner if isinstance(text, str))
        else:
            continue
        known = True
    return ("".join(answer), "".join(reasoning)) if known else None


MAX_TOKEN_COUNT = 1 << 31  # far past any context window; a larger count is not one (and sums of 4,000-digit
# numbers would pass Python's digit limit when the report is written)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_TOKEN_COUNT else None


def _short(value: Any) -> str | None:
    return str(value)[:200] if isinstance(value, (str, int, float)) else None


def backoff(tries: int) -> float:
    """Seconds to wait before the next try after ``tries`` unusable answers: 0.5, 1, 2, ... up to 8, jittered."""
    return min(0.5 * 2 ** (tries - 1), 8.0) * (1 - 0.25 * random.random())
