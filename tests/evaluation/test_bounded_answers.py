"""Every answer, whatever its status, ends by the request's deadline and stops at the size cap: dripping
headers, a dripping error body, a 200 MB error body, a gzip bomb; prompts go nowhere but --base-url; what a
server reports is taken only where it makes sense (a hostile server on 127.0.0.1)."""

import json
import resource
import threading
import time
import zlib

import pytest
from test_hostile import GOOD, ask, evaluate, one_line, raw, send  # noqa: F401 (raw: the fixture of hostile servers)

from rectune.core.io import RecTuneError


def drip_headers(handler, n):
    handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
    for _ in range(300):  # a header byte every 0.1 s: each read returns, the headers never end
        handler.wfile.write(b"X")
        handler.wfile.flush()
        time.sleep(0.1)


def drip_error(status):
    def respond(handler, n):
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        for _ in range(300):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.1)

    return respond


@pytest.mark.parametrize("respond", [drip_headers, drip_error(500), drip_error(400)], ids=["headers", "500", "400"])
def test_a_dripping_answer_of_any_status_ends_at_the_deadline(raw, respond):  # noqa: F811
    endpoint = raw(respond)
    start = time.monotonic()
    with pytest.raises(RecTuneError) as caught:
        ask(endpoint.url, retries=0, timeout=2.0)
    assert time.monotonic() - start < 4.0  # one deadline, not the 30 s the drip would take
    assert "\n" not in str(caught.value) and "after 1 try" in str(caught.value)


def test_a_200_mb_error_body_is_not_read_whole(raw):  # noqa: F811
    sent = []

    def huge_error(handler, n):
        handler.send_response(500)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(200 << 20))
        handler.end_headers()
        total = 0
        try:
            for _ in range(200):
                handler.wfile.write(b"x" * (1 << 20))
                total += 1 << 20
        finally:
            sent.append(total)

    endpoint = raw(huge_error)
    with pytest.raises(RecTuneError, match="over 1 MiB"):
        ask(endpoint.url, retries=0, timeout=30.0)
    deadline = time.monotonic() + 10
    while not sent and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sent and sent[0] < 32 << 20, sent  # the client stopped reading: the server could not send it all
    assert threading.active_count() < 50


def gzip_bomb(megabytes: int) -> bytes:
    """``megabytes`` MiB of JSON whitespace, gzipped to about a thousandth of that."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(packer.compress(b" " * (1 << 20)) for _ in range(megabytes)) + packer.flush()


@pytest.mark.parametrize("status", [200, 500])
def test_a_gzip_bomb_is_refused_unread_whatever_its_status(raw, status):  # noqa: F811
    bomb = gzip_bomb(1024)  # 1 MiB on the wire, 1 GiB read: the cap counts the wire
    asked = []

    def respond(handler, n):
        asked.append(handler.headers.get("Accept-Encoding"))
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(bomb)))
        handler.end_headers()
        handler.wfile.write(bomb)

    endpoint = raw(respond)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(RecTuneError, match=r"a compressed answer \(Content-Encoding: gzip\) where none was asked"):
        ask(endpoint.url, retries=0)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) >> 10
    assert grown_mib < 256, grown_mib  # the 500's body was inflated whole before: 3 GiB at the peak
    assert asked == ["identity"]


def test_a_redirect_is_not_followed_and_names_where_it_pointed(raw, monkeypatch):  # noqa: F811
    elsewhere = raw(lambda handler, n: send(handler, GOOD))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-redirectKey0123456789")

    def redirect(handler, n):
        handler.send_response(307)  # the key echoed in the path, a secret in the query
        handler.send_header("Location", f"{elsewhere.url}/sk-redirectKey0123456789/chat/completions?key=SECRET")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    endpoint = raw(redirect)
    with pytest.raises(RecTuneError) as caught:
        ask(endpoint.url, retries=3)
    message = str(caught.value)
    assert f"307 redirects to '{elsewhere.url}/***/chat/completions?key=***'" in message, message
    assert "give that address if you trust it" in message and "\n" not in message
    assert (endpoint.requests, elsewhere.requests) == (1, 0)  # the prompts stayed where they were sent


def test_token_counts_past_any_context_window_are_not_counted(raw, tmp_path, movie_data):  # noqa: F811
    answer = json.loads(GOOD)
    answer["usage"] = {"prompt_tokens": int("9" * 4300), "completion_tokens": 1 << 31}  # 4,300 digits: JSON's most
    endpoint = raw(lambda handler, n: send(handler, json.dumps(answer).encode()))
    result = evaluate(tmp_path / "r", movie_data, endpoint.url)
    assert result.returncode == 0, result.stderr[-2000:]  # the sum of 9 passed Python's digit limit: a traceback
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    usage = report["endpoint"]
    assert (usage["answers"], usage["prompt_tokens"], usage["completion_tokens"]) == (9, 0, 0), usage
