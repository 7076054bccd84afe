"""Every answer, whatever its status, ends by the request's deadline and stops at the size cap: dripping
headers, a dripping error body, a 200 MB error body (a hostile server on 127.0.0.1)."""

import threading
import time

import pytest
from test_hostile import ask, raw  # noqa: F401 (raw: the fixture of hostile servers)

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
