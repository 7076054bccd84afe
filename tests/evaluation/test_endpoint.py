"""--backend openai against real OpenAI-compatible servers on 127.0.0.1: `transformers serve` with the tiny
model (end to end, killed and restarted mid-run), and a small scripted HTTP endpoint for the failures a
hosted API produces (429 with Retry-After, 500, timeouts, 401, 404, 400 on every request)."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import ROOT, read_jsonl, run_script, wandb_run

from rectune.core.io import RecTuneError
from rectune.evaluation.endpoint import Endpoint, generate_endpoint, request_body
from rectune.models.generation import GenerationSettings

PLANTED_KEY = "sk-plantedEndpointKey0123456789abcdefghij"
SERVE = Path(sys.executable).parent / "transformers"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(model, port) -> subprocess.Popen:
    """`transformers serve MODEL` on 127.0.0.1:PORT, waited for until /health answers."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [str(SERVE), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
                if answer.status == 200:
                    return process
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise AssertionError("transformers serve did not start within 120 s")


def stop_server(process) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait()


@pytest.fixture
def served(tiny_model):
    port = free_port()
    process = start_server(tiny_model, port)
    info = {"model": tiny_model, "port": port, "url": f"http://127.0.0.1:{port}/v1", "process": process}
    yield info
    if info["process"].poll() is None:  # the server a test restarted, too
        stop_server(info["process"])


def evaluate(out, data, url, model, *flags, check=True):
    return run_script(
        "evaluate/run.py", "--backend", "openai", "--base-url", url, "--api-model", model, "--data", data,
        "--out", out, *flags, check=check,
    )  # fmt: skip


def test_an_evaluation_end_to_end_against_transformers_serve(tmp_path, served, movie_data, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED_KEY)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    out = tmp_path / "served"
    data = movie_data / "test.jsonl"
    evaluate(out, data, served["url"], served["model"], "--max-new-tokens", "8", "--concurrency", "4")
    rows = read_jsonl(data)
    lines = read_jsonl(out / "predictions.jsonl")
    assert sorted(line["id"] for line in lines) == sorted(row["id"] for row in rows)
    for line in lines:
        assert line["completion_tokens"] <= 8 and line["prompt_tokens"] > 0 and line["latency_s"] > 0
        assert line["finish_reason"] in ("stop", "length") and str(served["model"]) in line["served_model"]
    report = json.loads((out / "report.json").read_text())
    usage = report["endpoint"]
    assert usage["answers"] == len(rows)
    assert usage["completion_tokens"] == sum(line["completion_tokens"] for line in lines)
    assert usage["prompt_tokens"] == sum(line["prompt_tokens"] for line in lines)
    assert usage["queries_per_s"] > 0 and report["overall"]["n"] == len(rows)
    config = json.loads((out / "config.json").read_text())
    assert config["kind"] == "openai" and config["predictions_key"]["model"].startswith("endpoint ")
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        assert PLANTED_KEY.encode() not in path.read_bytes(), path  # the key is in no file, W&B's included
    (run_file,) = out.glob("wandb/offline-run-*/run-*.wandb")
    summary = wandb_run(run_file)["summary"]
    assert (
        summary["endpoint/answers"] == len(rows) and summary["endpoint/completion_tokens"] == usage["completion_tokens"]
    )

    again = evaluate(out, data, served["url"], served["model"], "--max-new-tokens", "8")
    assert "already done" in again.stderr and len(read_jsonl(out / "predictions.jsonl")) == len(rows)
    other = evaluate(out, data, served["url"], "another-model", "--max-new-tokens", "8", "--no-wandb", check=False)
    assert other.returncode == 2 and "made with a different model" in other.stderr


def test_a_server_killed_mid_run_and_restarted_loses_and_duplicates_nothing(tmp_path, served, movie_data):
    out = tmp_path / "served"
    data = movie_data / "test.jsonl"
    flags = ("--max-new-tokens", "200", "--concurrency", "1", "--max-retries", "1", "--no-wandb")
    command = [sys.executable, str(ROOT / "evaluate/run.py"), "--backend", "openai", "--base-url", served["url"],
               "--api-model", str(served["model"]), "--data", str(data), "--out", str(out), *flags]  # fmt: skip
    run = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    predictions = out / "predictions.jsonl"
    deadline = time.monotonic() + 120
    while not (predictions.is_file() and predictions.read_text().count("\n") >= 2) and time.monotonic() < deadline:
        time.sleep(0.02)
    stop_server(served["process"])
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 2, stderr[-3000:]
    assert stderr.splitlines()[-1].endswith("the answers so far are kept: rerun to resume")
    answered = len(read_jsonl(predictions))
    rows = read_jsonl(data)
    assert 2 <= answered < len(rows)

    served["process"] = start_server(served["model"], served["port"])
    rerun = evaluate(out, data, served["url"], served["model"], *flags)
    assert f"resuming: {answered} of {len(rows)} queries already done" in rerun.stderr
    ids = [line["id"] for line in read_jsonl(predictions)]
    assert sorted(ids) == sorted(row["id"] for row in rows)  # every query once: nothing lost, nothing twice


# --- a scripted endpoint for what hosted APIs do -------------------------------------------------

ANSWER = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "fake-model-2026",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "Heat [SEP] Casino", "reasoning_content": "They like Michael Mann."}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14},
}  # fmt: skip


class ScriptedEndpoint:
    """Answers POST /v1/chat/completions from a script: each entry is ``ok``, ``(status, headers)`` or
    ``("sleep", seconds)``; once the script runs out every request gets ``ok``. A request ``refuse`` returns an
    error body for gets it with a 400 instead (or ``(status, body)``)."""

    def __init__(self, script, content=lambda body: ANSWER["choices"][0]["message"]["content"], refuse=lambda _: None):
        self.script = list(script)
        self.requests: list[tuple[float, dict]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append((time.monotonic(), body))
                step = endpoint.script.pop(0) if endpoint.script else "ok"
                if isinstance(step, tuple) and step[0] == "sleep":
                    time.sleep(step[1])
                    step = "ok"
                status, headers = (200, {}) if step == "ok" else step
                refusal = refuse(body)
                if refusal:
                    status, payload = refusal if isinstance(refusal, tuple) else (400, refusal)
                elif status == 200:
                    message = {**ANSWER["choices"][0]["message"], "content": content(body)}
                    payload = {**ANSWER, "choices": [{**ANSWER["choices"][0], "message": message}]}
                else:
                    payload = {"error": {"message": f"scripted {status}", "type": "x"}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError):  # the client timed out and left
                    self.wfile.write(data)

            def log_message(self, *args):
                """Quiet: the default handler prints every request to stderr."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted():
    made = []

    def make(*script, **options):
        made.append(ScriptedEndpoint(script, **options))
        return made[-1]

    yield make
    for endpoint in made:
        endpoint.close()


PROMPT = [{"role": "user", "content": "Recommend movies like Heat."}]


def ask(endpoint, count=1, **settings):
    target = Endpoint(endpoint.url, "fake-model", timeout=settings.pop("timeout", 30), max_retries=2, concurrency=2)
    batches = generate_endpoint(target, [PROMPT] * count, GenerationSettings(**settings))
    return [item for batch in batches for item in batch]


def test_429_is_retried_after_the_time_retry_after_asks(scripted):
    endpoint = scripted((429, {"Retry-After": "1"}))
    (answer,) = ask(endpoint)
    (first, _), (second, _) = endpoint.requests
    assert second - first >= 1.0 and answer[1] == "Heat [SEP] Casino"


def test_500_and_a_timeout_are_retried(scripted):
    endpoint = scripted((500, {}), ("sleep", 3))
    (answer,) = ask(endpoint, timeout=1)
    assert len(endpoint.requests) == 3 and answer[1] == "Heat [SEP] Casino"


def test_what_the_endpoint_said_is_recorded_and_reasoning_kept_apart(scripted):
    endpoint = scripted()
    ((index, answer, record),) = ask(endpoint, max_new_tokens=50, do_sample=True, temperature=0.7, seed=3)
    assert (index, answer) == (0, "Heat [SEP] Casino")
    assert record["reasoning"] == "They like Michael Mann." and record["served_model"] == "fake-model-2026"
    assert (record["prompt_tokens"], record["completion_tokens"], record["finish_reason"]) == (10, 4, "stop")
    sent = endpoint.requests[0][1]
    assert sent == request_body(PROMPT, "fake-model", GenerationSettings(max_new_tokens=50, do_sample=True,
                                                                          temperature=0.7, seed=3))  # fmt: skip
    assert (sent["max_tokens"], sent["temperature"], sent["seed"], sent["top_p"]) == (50, 0.7, 3, 1.0)
    greedy = request_body(PROMPT, "m", GenerationSettings(stop=("\n\n",)))
    assert greedy["temperature"] == 0.0 and greedy["stop"] == ["\n\n"] and "top_p" not in greedy


@pytest.mark.parametrize(
    ("status", "words"), [(401, ["401", "OPENAI_API_KEY"]), (404, ["404", "fake-model", "model name"])]
)
def test_hard_errors_stop_at_once_with_one_line(scripted, tmp_path, movie_data, monkeypatch, status, words):
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED_KEY)
    endpoint = scripted(*[(status, {})] * 50)
    result = evaluate(tmp_path / "r", movie_data / "test.jsonl", endpoint.url, "fake-model", "--no-wandb",
                      "--concurrency", "1", check=False)  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1].startswith("error: ") and all(w in result.stderr for w in words)
    assert len(endpoint.requests) == 1  # not retried, nothing more sent


def test_400_on_every_request_stops_and_a_single_400_is_asked_again(scripted, tmp_path, movie_data):
    endpoint = scripted(*[(400, {})] * 50)
    with pytest.raises(RecTuneError, match="every request refused: 400: scripted 400"):
        ask(endpoint, count=20)
    assert len(endpoint.requests) <= 4  # three refusals (and one in flight), then nothing more

    endpoint = scripted((400, {}))
    out = tmp_path / "r"
    first = evaluate(out, movie_data / "test.jsonl", endpoint.url, "fake-model", "--no-wandb", "--concurrency", "1",
                     check=False)  # fmt: skip
    assert first.returncode == 2 and "1 of 9 requests failed: 400: scripted 400" in first.stderr.splitlines()[-1]
    lines = read_jsonl(out / "predictions.jsonl")
    assert sum("error" in line for line in lines) == 1
    rerun = evaluate(out, movie_data / "test.jsonl", endpoint.url, "fake-model", "--no-wandb")
    assert "1 request(s) the endpoint refused last time are sent again" in rerun.stderr
    lines = read_jsonl(out / "predictions.jsonl")
    assert not any("error" in line for line in lines) and len(lines) == len(read_jsonl(movie_data / "test.jsonl"))


def reasoning_model(body):
    """What OpenAI's reasoning models (o-series, GPT-5) answer a request they refuse, their error bodies word for
    word: max_tokens, a temperature other than 1 and top_p are refused."""
    if "max_tokens" in body:
        message = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
        return {"error": {"message": message + "instead.", "type": "invalid_request_error", "param": "max_tokens",
                          "code": "unsupported_parameter"}}  # fmt: skip
    if body.get("temperature", 1) != 1:
        message = f"Unsupported value: 'temperature' does not support {body['temperature']:g} with this model. Only "
        return {"error": {"message": message + "the default (1) value is supported.", "type": "invalid_request_error",
                          "param": "temperature", "code": "unsupported_value"}}  # fmt: skip
    if "top_p" in body:
        message = "Unsupported parameter: 'top_p' is not supported with this model."
        return {"error": {"message": message, "type": "invalid_request_error", "param": "top_p",
                          "code": "unsupported_parameter"}}  # fmt: skip
    return None


def test_a_reasoning_model_is_asked_for_its_length_limit_by_the_name_it_takes(scripted, tmp_path, movie_data):
    """max_tokens, refused by name, had stopped the run after three requests: every reasoning model was out of
    reach. Greedy decoding it cannot do is one line saying how to score its samples."""
    endpoint = scripted(refuse=reasoning_model)
    line = (
        "fake-model at {url}: refuses temperature 0.0: Unsupported value: 'temperature' does not support 0 with this "
        "model. Only the default (1) value is supported. (a model that samples only at temperature 1, as OpenAI's "
        "reasoning models do, is scored by evaluate/run.py --do-sample --temperature 1)"
    )
    with pytest.raises(RecTuneError) as caught:
        ask(endpoint, count=6)
    assert str(caught.value) == line.format(url=endpoint.url)
    keys = [sorted(body) for _, body in endpoint.requests]  # two in flight at once: each refused, then sent again
    assert keys[0] == ["max_tokens", "messages", "model", "seed", "temperature"] and len(keys) <= 4
    assert ["max_completion_tokens", "messages", "model", "seed", "temperature"] in keys

    endpoint = scripted(refuse=reasoning_model)
    out = tmp_path / "sampled"
    run = evaluate(out, movie_data / "test.jsonl", endpoint.url, "fake-model", "--do-sample", "--temperature", "1",
                   "--max-new-tokens", "300", "--concurrency", "1", "--no-wandb")  # fmt: skip
    assert "fake-model refuses max_tokens: max_tokens sent as max_completion_tokens from now on" in run.stderr
    assert "fake-model refuses top_p: top_p 1 left out from now on" in run.stderr
    sent = [body for _, body in endpoint.requests]
    rows = read_jsonl(movie_data / "test.jsonl")
    assert len(sent) == len(rows) + 2  # the first request twice refused, then every one answered at once
    assert all(body["max_completion_tokens"] == 300 and body["temperature"] == 1.0 for body in sent[2:])
    assert not any("max_tokens" in body or "top_p" in body for body in sent[2:])
    changes = ["max_tokens sent as max_completion_tokens", "top_p 1 left out"]
    assert all(line["request_changes"] == changes for line in read_jsonl(out / "predictions.jsonl"))
    report = json.loads((out / "report.json").read_text())
    assert report["endpoint"]["request_changes"] == changes and report["overall"]["n"] == len(rows)


def gemini(body):
    """What Google's OpenAI-compatible Gemini endpoint answers a request with a seed, word for word: a list."""
    if "seed" not in body:
        return None
    said = 'Invalid JSON payload received. Unknown name "seed": Cannot find field.'
    details = [{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [{"description": said}]}]
    return [{"error": {"code": 400, "message": said, "status": "INVALID_ARGUMENT", "details": details}}]


def mistral(body):
    """What Mistral's API answers a field it does not know (its seed is random_seed), word for word: a 422."""
    if "seed" not in body:
        return None
    forbidden = {"type": "extra_forbidden", "loc": ["body", "seed"], "msg": "Extra inputs are not permitted",
                 "input": body["seed"]}  # fmt: skip
    return 422, {"object": "error", "message": {"detail": [forbidden]}, "type": "invalid_request_error",
                 "param": None, "code": None}  # fmt: skip


@pytest.mark.parametrize("server", [gemini, mistral])
def test_a_seed_the_server_refuses_is_left_out(scripted, server):
    """Every request carried a seed, which Gemini's endpoint and Mistral's API refuse: every run had stopped."""
    endpoint = scripted(refuse=server)
    answers = ask(endpoint, count=5)
    assert [answer for _, answer, _ in answers] == ["Heat [SEP] Casino"] * 5
    assert all(record["request_changes"] == ["seed left out"] for _, _, record in answers)
    sent = [body for _, body in endpoint.requests]
    assert sum("seed" in body for body in sent) <= 2 and len(sent) == 5 + sum("seed" in body for body in sent)
    assert all(body["max_tokens"] == 256 and body["temperature"] == 0.0 for body in sent)  # the rest as it was


def test_only_parameters_with_a_stand_in_of_the_same_meaning_are_sent_otherwise():
    from rectune.evaluation.refused_parameters import (
        refused_parameter,
        refused_temperature,
        resendable,
        without_refused,
    )

    proxy = {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                                  "'max_completion_tokens' instead.", "code": "invalid_request_body"}}  # fmt: skip
    assert refused_parameter(proxy) == "max_tokens"  # a proxy passing the message on without OpenAI's param
    assert refused_parameter({"error": {"message": "scripted 400"}}) is None and refused_parameter("<html>") is None
    assert refused_parameter(gemini({"seed": 0})) == "seed" and refused_parameter([]) is None
    assert refused_parameter(mistral({"seed": 0})[1]) == "seed"
    details = [{"type": "missing", "loc": ["body", "model"]}, "?", {"type": "extra_forbidden", "loc": ["body", "n"]}]
    assert refused_parameter({"detail": details}) == "n"  # a FastAPI server's 422
    as_text = {"object": "error", "message": json.dumps(mistral({"seed": 0})[1]["message"]), "param": None}
    assert refused_parameter(as_text) == "seed"  # Mistral's proxy wrote its detail as JSON text
    assert refused_parameter({"detail": [{"type": "extra_forbidden"}]}) is None
    too_long = {"object": "error", "message": "This model's maximum context length is 2048 tokens. However, you "
                "requested 2100 tokens", "type": "BadRequestError", "param": "max_tokens", "code": 400}  # fmt: skip
    assert refused_parameter(too_long) is None  # a value refused, not the parameter: nothing to send otherwise
    assert refused_temperature(reasoning_model({"temperature": 0})) and not refused_temperature(too_long)
    body = {"model": "m", "max_tokens": 50, "top_p": 0.9, "seed": 0}
    assert list(resendable(body, "max_tokens").items()) == [
        ("model", "m"), ("max_completion_tokens", 50), ("top_p", 0.9), ("seed", 0)]  # fmt: skip
    assert resendable(body, "top_p") is None  # 0.9 cuts the distribution: left out, it would sample otherwise
    assert resendable(body, "temperature") is None and resendable(body, "stop") is None
    assert resendable({"temperature": 1.0, "seed": 0}, "temperature") == {"seed": 0}  # o1: no temperature at all
    assert without_refused({**body, "top_p": 1.0}, {"max_tokens", "top_p"}) == {
        "model": "m", "max_completion_tokens": 50, "seed": 0}  # fmt: skip


def test_a_remote_endpoint_needs_a_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(RecTuneError, match="no API key for https://api.example.com/v1: set OPENAI_API_KEY"):
        list(generate_endpoint(Endpoint("https://api.example.com/v1", "m"), [PROMPT], GenerationSettings()))


@pytest.mark.parametrize(
    ("url", "line"),
    [("localhost:8000/v1", "--base-url localhost:8000/v1: give an http:// or https:// address with a host, e.g. "
                           "http://127.0.0.1:8000/v1"),  # no scheme: every request failed as unreachable
     ("file:///etc/passwd", "--base-url file:///etc/passwd: give an http:// or https:// address with a host, e.g. "
                            "http://127.0.0.1:8000/v1"),
     ("http://[::1/v1", "--base-url: not a URL (Invalid IPv6 URL)"),  # a ValueError traceback
     ("http://me:hunter22@host:99999/v1", "--base-url: not a URL (Port out of range 0-65535)")],  # the key unsaid
)  # fmt: skip
def test_an_address_the_client_cannot_send_to_is_one_line(url, line):
    with pytest.raises(RecTuneError) as caught:
        Endpoint(url, "m")
    assert str(caught.value) == line
    assert (
        Endpoint("https://api.example.com:8443/v1?key=x", "m").describe()
        == "m at https://api.example.com:8443/v1?key=***"
    )


def test_the_builder_rewrites_queries_through_an_endpoint(scripted, tmp_path, monkeypatch):
    """--rewrite-model with --base-url: every condition query is sent; an answer keeping the names is used."""
    from test_builder import HISTORIES, ITEMS, USERS

    monkeypatch.setenv("REWRITE_KEY", PLANTED_KEY)
    endpoint = scripted(content=lambda body: "Hey! " + body["messages"][-1]["content"].split("\n\n", 1)[1])
    kg = tmp_path / "items.jsonl"
    kg.write_text("".join(json.dumps({"id": i.id, "title": i.title, "relations": i.attributes}) + "\n" for i in ITEMS))
    ratings = tmp_path / "ratings.dat"
    ratings.write_text("".join(f"{u}::{i}::4::{t}\n" for u, items in HISTORIES.items() for t, i in enumerate(items)))
    users = tmp_path / "users.dat"
    users.write_text("".join(f"{u}::{p['gender']}::{p['age']}::student::0\n" for u, p in USERS.items()))
    inputs = ("--kg", kg, "--ratings", ratings, "--users", users)
    run_script("data_prep/build_benchmark.py", *inputs, "--out", tmp_path / "plain")
    run_script("data_prep/build_benchmark.py", *inputs, "--out", tmp_path / "rewritten", "--rewrite-model", "gpt-4o",
               "--base-url", endpoint.url, "--api-key-env", "REWRITE_KEY")  # fmt: skip
    explicit = "dataset/movie/ExplicitQuery.json"
    plain, rewritten = (json.loads((tmp_path / name / explicit).read_text()) for name in ("plain", "rewritten"))
    changed = [(a[key], b[key]) for a, b in zip(plain, rewritten, strict=True) for key in a if a[key] != b[key]]
    assert plain and changed and all(new == f"Hey! {old}" for old, new in changed)  # the endpoint's rewrite, used
    sent = [body for _, body in endpoint.requests]
    assert all(body["model"] == "gpt-4o" and body["temperature"] == 0.0 for body in sent)
    assert len(sent) >= len(changed)
    assert not any(PLANTED_KEY.encode() in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.parametrize("benchmark", ["perrecbench", "llmrec"])
def test_the_other_benchmarks_are_scored_through_an_endpoint(scripted, tmp_path, benchmark):
    from rectune.benchmarks import get_benchmark, load_rows

    data = tmp_path / "data"
    if benchmark == "perrecbench":
        ratings = ROOT / "tests" / "fixtures" / "ratings"
        source = ("--reviews", ratings / "ratings.dat", "--items", ratings / "movies.dat", "--domain", "beauty")
        run_script("data_prep/perrecbench.py", *source, "--min-history", "2", "--k", "1", "--test-size", "1.0",
                   "--out", data)  # fmt: skip
    else:
        amazon = ROOT / "tests" / "fixtures" / "amazon"
        source = ("--reviews", amazon / "reviews_2023.jsonl", "--items", amazon / "meta_2023.jsonl", "--domain", "b")
        run_script("data_prep/llmrec.py", *source, "--out", data, "--num-candidates", "4")
    endpoint = scripted()
    out = tmp_path / "r"
    evaluate(out, data / "test.jsonl", endpoint.url, "fake-model", "--no-wandb")
    rows = load_rows(data / "test.jsonl")
    sent = sorted(json.dumps(body["messages"]) for _, body in endpoint.requests)
    assert sent == sorted(json.dumps(get_benchmark(r.benchmark).messages(r, {})) for r in rows)  # the same prompts
    report = json.loads((out / "report.json").read_text())
    assert report["overall"]["n"] > 0 and report["endpoint"]["answers"] == len(rows)  # n counts PerRecBench groups
