"""A hostile world: servers that answer 200 with no completion, drip bytes for ever, send 50 MB or refuse
some requests; folders holding a user's files; lock files that are symbolic links; YAML alias bombs.
Each case gets a one-line error (or a correct result) and leaves every foreign file and its mode as it was."""

import contextlib
import json
import os
import shutil
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import RELEASE, read_jsonl, run_script, write_recipe
from test_endpoint import ANSWER, PROMPT, ScriptedEndpoint

from rectune.core import locks
from rectune.core.io import RecTuneError
from rectune.core.locks import hold_output_lock, lock_path, release_output_lock
from rectune.core.secrets import redact_url
from rectune.evaluation.endpoint import Endpoint, generate_endpoint
from rectune.evaluation.endpoint_request import MAX_ANSWER_BYTES
from rectune.models.generation import GenerationSettings

PLANTED_KEY = "sk-urlPlantedKey0123456789abcdef"


def one_line(result, *words):
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.splitlines()[-1]
    assert last.startswith("error: ") and "Traceback" not in result.stderr, result.stderr[-2000:]
    for word in words:
        assert word in last, last
    return last


def snapshot(folder):
    """Every file under ``folder`` with its bytes and mode: what a run must leave as it found it."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# --- a server whose 200 answers are not completions ---------------------------------------------


class RawEndpoint:
    """Answers every POST with ``respond(handler, request_number)``: raw bytes, drips, whatever it likes."""

    def __init__(self, respond):
        self.requests = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.requests += 1
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    respond(self, endpoint.requests)

            def log_message(self, *args):
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def send(handler, body: bytes, content_type="application/json", status=200, length=None):
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body) if length is None else length))
    handler.end_headers()
    handler.wfile.write(body)


GOOD = json.dumps(ANSWER).encode()
BAD_BODIES = {
    "malformed JSON": (b'{"choices": [{"message": ', "application/json", "not JSON"),
    "choices empty": (b'{"choices": []}', "application/json", "no choices"),
    "choices null": (b'{"choices": null}', "application/json", "no choices"),
    "an HTML page": (b"<html><body>Gateway maintenance</body></html>", "text/html", "not JSON"),
    "a message without text": (b'{"choices": [{"message": {"content": 7}}]}', "application/json", "no message"),
    "content parts of no known kind": (
        b'{"choices": [{"message": {"content": [{"type": "image_url", "image_url": {}}, 7]}}]}',
        "application/json",
        "no message",
    ),
}


@pytest.fixture
def raw():
    made = []

    def make(respond):
        made.append(RawEndpoint(respond))
        return made[-1]

    yield make
    for endpoint in made:
        endpoint.close()


def ask(url, *, retries=2, timeout=30.0, count=1):
    target = Endpoint(url, "fake-model", timeout=timeout, max_retries=retries, concurrency=1)
    return [item for batch in generate_endpoint(target, [PROMPT] * count, GenerationSettings()) for item in batch]


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_a_200_that_is_no_completion_is_retried_then_stops_with_one_line(raw, case):
    body, content_type, words = BAD_BODIES[case]
    endpoint = raw(lambda handler, n: send(handler, body, content_type))
    with pytest.raises(RecTuneError) as caught:
        ask(endpoint.url, retries=2)
    message = str(caught.value)
    assert words in message and "after 3 tries" in message and "\n" not in message, message
    assert endpoint.requests == 3


def test_an_unusable_answer_followed_by_a_good_one_is_used(raw):
    endpoint = raw(lambda handler, n: send(handler, b"{}" if n == 1 else GOOD))
    ((index, answer, record),) = ask(endpoint.url)
    assert (index, answer, endpoint.requests) == (0, "Heat [SEP] Casino", 2)
    assert record["completion_tokens"] == 4


def test_content_parts_are_read_as_mistrals_reasoning_models_send_them(raw):
    """Magistral answers with a list of parts, its thinking first: that list was an unusable answer."""
    parts = [
        {"type": "thinking", "thinking": [{"type": "text", "text": "They like "}, {"type": "text", "text": "Mann."}]},
        {"type": "text", "text": "Heat [SEP] "},
        {"type": "text", "text": "Casino"},
    ]
    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": parts}, "finish_reason": "stop"}]})
    endpoint = raw(lambda handler, n: send(handler, body.encode()))
    ((index, answer, record),) = ask(endpoint.url)
    assert (answer, record["reasoning"], endpoint.requests) == ("Heat [SEP] Casino", "They like Mann.", 1)


def test_half_a_character_in_an_answer_is_read_as_the_replacement_character(raw, tmp_path, movie_data):
    """JSON may escape half a UTF-16 pair ("\\udcff", "\\ud83d" cut from its emoji): no character, so writing the
    answer to predictions.jsonl failed to encode it, a traceback with the report folder half written."""
    body = json.dumps({"choices": [{"message": {"content": "Heat\udcff [SEP] Casino \ud83d"}}]})  # escaped
    endpoint = raw(lambda handler, n: send(handler, body.encode()))
    result = evaluate(tmp_path / "r", movie_data, endpoint.url)
    assert result.returncode == 0, result.stderr[-2000:]
    answers = [json.loads(line)["completion"] for line in (tmp_path / "r" / "predictions.jsonl").open()]
    assert set(answers) == {"Heat\ufffd [SEP] Casino \ufffd"}


def test_the_evaluation_script_turns_a_malformed_answer_into_one_line(raw, tmp_path, movie_data):
    endpoint = raw(lambda handler, n: send(handler, b"<html>502 Bad Gateway</html>", "text/html"))
    result = evaluate(tmp_path / "r", movie_data, endpoint.url, "--max-retries", "1")
    one_line(result, "not JSON", "after 2 tries", "rerun to resume")


def promise_a_long_answer(handler):
    """A 200 whose headers announce 100 kB, so the client keeps reading what follows."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()


def test_a_server_dripping_bytes_is_cut_off_at_the_request_timeout(raw):
    def drip(handler, n):
        promise_a_long_answer(handler)
        for _ in range(300):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.1)

    endpoint = raw(drip)
    start = time.monotonic()
    with pytest.raises(RecTuneError, match="no complete answer before --request-timeout.* after 1 try"):
        ask(endpoint.url, retries=0, timeout=2.0)
    assert time.monotonic() - start < 4.0  # the whole request, not the gap between bytes (that would be 30 s)


def test_a_server_that_goes_silent_mid_answer_is_cut_off_too(raw):
    def stall(handler, n):
        promise_a_long_answer(handler)
        handler.wfile.write(b'{"choices": ')
        handler.wfile.flush()
        time.sleep(1.2)  # a byte now and then, then silence: a read blocked on it ends only when cut off
        handler.wfile.write(b" ")
        handler.wfile.flush()
        time.sleep(30)

    endpoint = raw(stall)
    start = time.monotonic()
    with pytest.raises(RecTuneError, match="no complete answer before --request-timeout"):
        ask(endpoint.url, retries=0, timeout=2.0)
    assert time.monotonic() - start < 3.5


def test_a_50_mb_answer_is_refused_without_storing_it(raw, tmp_path, movie_data):
    huge = b'{"choices": [{"message": {"content": "' + b"x" * (50 << 20) + b'"}}]}'
    endpoint = raw(lambda handler, n: send(handler, huge))
    with pytest.raises(RecTuneError, match=f"an answer over {MAX_ANSWER_BYTES >> 20} MiB after 1 try"):
        ask(endpoint.url, retries=0)
    result = evaluate(tmp_path / "r", movie_data, endpoint.url, "--max-retries", "0", "--limit", "3")
    one_line(result, "over 1 MiB")
    predictions = tmp_path / "r" / "predictions.jsonl"
    assert not predictions.exists() or predictions.stat().st_size < 1 << 20


def test_a_huge_retry_after_stops_at_once_and_says_one_try(tmp_path):
    endpoint = ScriptedEndpoint([(429, {"Retry-After": "86400"})] * 5)
    try:
        with pytest.raises(RecTuneError, match=r"429 scripted 429 after 1 try;"):
            ask(endpoint.url, retries=5)
        assert len(endpoint.requests) == 1
    finally:
        endpoint.close()


# --- refused requests are failures, not empty answers ------------------------------------------


def evaluate(out, data, url, *flags, wandb=False):
    return run_script(
        "evaluate/run.py", "--backend", "openai", "--base-url", url, "--api-model", "fake-model", "--data",
        data / "test.jsonl", "--out", out, *([] if wandb else ["--no-wandb"]), "--concurrency", "1", *flags,
        check=False,
    )  # fmt: skip


def test_refused_requests_fail_the_run_unless_scored_as_empty_on_request(tmp_path, movie_data):
    script = ["ok", (400, {}), "ok", "ok", (400, {}), "ok", "ok", "ok", (400, {})]  # the fixture's 9 queries
    endpoint = ScriptedEndpoint(script)
    try:
        out = tmp_path / "r"
        result = evaluate(out, movie_data, endpoint.url)
        one_line(result, "3 of 9 requests failed: 400: scripted 400", "--score-failures-as-empty")
        assert not (out / "report.json").exists()
        assert sum("error" in row for row in read_jsonl(out / "predictions.jsonl")) == 3

        endpoint.script = [(400, {}), "ok", (400, {})]  # the rerun asks the three again; two refused again
        result = evaluate(out, movie_data, endpoint.url, "--score-failures-as-empty")
        assert result.returncode == 0, result.stderr[-2000:]
        report = json.loads((out / "report.json").read_text())
        assert report["failed_requests"] == 2 and report["endpoint"]["answers"] == 7
        assert "HTTP Request" not in result.stderr  # one log line per request only with --verbose
    finally:
        endpoint.close()


def test_credentials_in_the_url_never_reach_disk_or_the_terminal(tmp_path, movie_data, monkeypatch):
    assert redact_url(f"http://user:{PLANTED_KEY}@h:8000/v1?api_key={PLANTED_KEY}&x=1") == (
        "http://***@h:8000/v1?api_key=***&x=***"
    )
    monkeypatch.setenv("WANDB_MODE", "offline")
    endpoint = ScriptedEndpoint([(404, {})])
    try:
        host, second = endpoint.url.removeprefix("http://"), PLANTED_KEY[::-1]
        url = f"http://us:p@ss{PLANTED_KEY}@{host}?code={second}"  # a password holding "@", a key under any name
        out = tmp_path / "r"
        result = evaluate(out, movie_data, url, "--limit", "2")
        one_line(result, "404", "***@127.0.0.1")
        assert PLANTED_KEY not in result.stderr + result.stdout and second not in result.stderr + result.stdout
        result = evaluate(out, movie_data, url, "--limit", "2", wandb=True)  # W&B records the command line
        assert result.returncode == 0 and PLANTED_KEY not in result.stderr + result.stdout
        assert any(p.suffix == ".wandb" for p in out.rglob("*"))
        for path in (p for p in out.rglob("*") if p.is_file()):
            assert PLANTED_KEY.encode() not in path.read_bytes() and second.encode() not in path.read_bytes(), path
        assert "***@127.0.0.1" in json.loads((out / "config.json").read_text())["checkpoint"]
    finally:
        endpoint.close()


# --- folders: training owns only what it made; leftovers by exact name; content checked -----------


def sft_recipe(tmp_path, tiny_model, train_data, out):
    return write_recipe(
        tmp_path / "sft.yaml", model_name_or_path=str(tiny_model), output_dir=str(out), max_steps=1, save_steps=1,
        report_to=["none"], use_peft=True, lora_r=4, lora_alpha=8, lora_target_modules=["q_proj", "v_proj"],
        datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
    )  # fmt: skip


def a_home(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / "README.md").write_text("my notes\n")
    key = home / ".ssh" / "id_rsa"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o600)
    (home / ".netrc").write_text("machine api.wandb.ai login user password secret\n")
    (home / ".netrc").chmod(0o600)
    return home


def test_training_refuses_a_folder_it_does_not_own_and_touches_nothing(tmp_path, tiny_model, train_data):
    home = a_home(tmp_path)
    before = snapshot(home)
    recipe = sft_recipe(tmp_path, tiny_model, train_data, tmp_path / "unused")
    one_line(run_script("train/sft.py", recipe, "--output_dir", home, check=False), str(home), ".netrc")
    assert snapshot(home) == before

    recipe = write_recipe(tmp_path / "r.yaml", output_dir=str(home), overwrite=True)
    one_line(run_script("train/sft.py", recipe, check=False), "overwrite", "pass --overwrite")


def test_training_with_overwrite_changes_the_modes_of_its_own_files_only(tmp_path, tiny_model, train_data):
    home = a_home(tmp_path)
    recipe = sft_recipe(tmp_path, tiny_model, train_data, home)
    run_script("train/sft.py", recipe, "--overwrite")
    assert stat.S_IMODE((home / ".ssh" / "id_rsa").stat().st_mode) == 0o600
    assert stat.S_IMODE((home / ".netrc").stat().st_mode) == 0o600
    assert (home / ".ssh" / "id_rsa").read_text().startswith("-----BEGIN")
    adapter = home / "adapter_model.safetensors"
    assert stat.S_IMODE(adapter.stat().st_mode) & 0o044 == 0o044  # written by the run: readable to others


def test_a_training_folder_is_resumed_and_an_edited_file_is_refused(tmp_path, tiny_model, train_data):
    out = tmp_path / "run" / "sft"
    recipe = sft_recipe(tmp_path, tiny_model, train_data, out)
    run_script("train/sft.py", recipe)
    rerun = run_script("train/sft.py", recipe)
    assert "nothing to do" in rerun.stdout  # its own folder: accepted, the finished stage kept
    (out / "README.md").write_text("my edited card\n")
    one_line(run_script("train/sft.py", recipe, check=False), "README.md changed since RecTune wrote it")
    assert (out / "README.md").read_text() == "my edited card\n"


def prepare(out, *flags):
    return run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", out, *flags, check=False)


def test_hidden_user_files_named_like_leftovers_are_refused_not_deleted(tmp_path):
    out = tmp_path / "data"
    assert prepare(out).returncode == 0
    (out / ".notes.tmp").write_text("mine\n")
    (out / ".session.lock").write_text("mine too\n")
    one_line(prepare(out), ".notes.tmp", ".session.lock")
    assert (out / ".notes.tmp").read_text() == "mine\n" and (out / ".session.lock").read_text() == "mine too\n"


def test_our_own_leftovers_are_still_recognised(tmp_path):
    out = tmp_path / "data"
    assert prepare(out).returncode == 0
    (out / f".catalog.jsonl.rectune-{os.getpid()}-abc123.tmp").write_text("{")  # an atomic_write cut short
    (out / ".catalog.jsonl.lock").write_text("")
    assert prepare(out).returncode == 0


def test_a_file_edited_in_a_prepared_folder_is_refused_by_its_content(tmp_path):
    out = tmp_path / "data"
    assert prepare(out).returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)  # copied with its marker: still checked by content
    for folder in (out, copy):
        with (folder / "catalog.jsonl").open("a") as handle:
            handle.write('{"id": "mine", "title": "My Film"}\n')
        edited = (folder / "catalog.jsonl").read_bytes()
        one_line(prepare(folder), "catalog.jsonl changed since RecTune wrote it")
        assert (folder / "catalog.jsonl").read_bytes() == edited
    assert prepare(out, "--overwrite").returncode == 0
    assert prepare(out).returncode == 0  # rewritten and recorded afresh


def test_an_output_at_or_under_a_link_to_nothing_or_to_itself_is_one_line(tmp_path, movie_data):
    """Path.resolve raised on a link to itself, and mkdir under a link to nothing raised FileExistsError: tracebacks
    in data_prep, evaluation, score.py and compare.py alike."""
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    report = tmp_path / "report"
    report.mkdir()
    summary = {"n": 1, "precision": 0.5, "recall": 0.5, "cmr": None, "ftr": 0.0}
    (report / "report.json").write_text(json.dumps({"overall": summary, "by_task": {}}))
    one_line(prepare(tmp_path / "loop"), "loop: is a symbolic link; give the folder itself")
    merged = run_script("train/merge.py", "--adapters", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "loop",
                        check=False)  # fmt: skip
    one_line(merged, "loop: is a symbolic link; give the folder itself")
    for link in ("loop", "gone"):
        words = f"{tmp_path / link} is a symbolic link to nothing (or to itself), so nothing can be written under it"
        one_line(prepare(tmp_path / link / "data"), words)
        score = ("--data", movie_data / "test.jsonl", "--predictions", movie_data / "test.jsonl")
        one_line(run_script("evaluate/score.py", *score, "--out", tmp_path / link / "r.json", check=False), words)
        one_line(run_script("evaluate/compare.py", report, "--out", tmp_path / link / "c", check=False), words)
    assert not (tmp_path / "nowhere").exists()


def test_an_output_name_too_long_for_its_lock_and_temporary_files_is_one_line(tmp_path, movie_data):
    """A name of 250 bytes fits the file system, its `.NAME.lock` and `.NAME.rectune-PID-….tmp` do not: the kernel's
    "File name too long" was a traceback as the lock was made; a longer folder on the way was made, then left."""
    report = tmp_path / "report"
    report.mkdir()
    summary = {"n": 1, "precision": 0.5, "recall": 0.5, "cmr": None, "ftr": 0.0}
    (report / "report.json").write_text(json.dumps({"overall": summary, "by_task": {}}))
    name, words = "a" * 250, "a name of 250 bytes; the lock and temporary files RecTune writes beside it"
    one_line(prepare(tmp_path / name), words)
    score = ("--data", movie_data / "test.jsonl", "--predictions", movie_data / "test.jsonl")
    one_line(run_script("evaluate/score.py", *score, "--out", tmp_path / name, check=False), words)
    one_line(run_script("evaluate/compare.py", report, "--out", tmp_path / ("c" * 196), check=False),
             "a name of 199 bytes")  # its tables' names: the prefix and ".png"  # fmt: skip
    one_line(prepare(tmp_path / "x" / ("b" * 300) / "data"), "a folder name of 300 bytes; at most 255 here")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report"]  # nothing made on the way
    assert prepare(tmp_path / ("d" * 198)).returncode == 0  # the longest name that leaves room for them


# --- locks that cannot be tricked --------------------------------------------------------------


def test_a_lock_file_that_is_a_symbolic_link_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o640)
    out = tmp_path / "data"
    lock_path(out).symlink_to(victim)
    one_line(prepare(out), "symbolic link")
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o640
    assert not out.exists()


def test_a_lock_file_removed_between_open_and_flock_is_not_held(tmp_path, monkeypatch):
    """A waiter that opened the old file as its holder released (and removed) it must lock the new file."""
    target = tmp_path / "out"
    path = lock_path(target)
    real_flock = locks.fcntl.flock
    calls = []

    def flock_after_release(descriptor, operation):
        if not calls:
            os.unlink(path)  # the holder releases: the file this process opened is no longer at path
        calls.append(descriptor)
        return real_flock(descriptor, operation)

    monkeypatch.setattr(locks.fcntl, "flock", flock_after_release)
    hold_output_lock(target)
    try:
        held = os.fstat(locks._HELD[path])
        assert len(calls) == 2 and (held.st_dev, held.st_ino) == (path.stat().st_dev, path.stat().st_ino)
    finally:
        release_output_lock(target)


# --- recipes ------------------------------------------------------------------------------------


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    recipe = tmp_path / "bomb.yaml"
    lines = ["model_name_or_path: embedded:smollm2", 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 8)}]" for i in range(1, 9)]
    lines.append("wandb_tags: *a8")  # 8**9 = 134 million strings once expanded
    recipe.write_text("\n".join(lines) + "\n")
    one_line(run_script("train/sft.py", recipe, check=False), f"{recipe}:3: YAML alias *a0")


class EchoingServer:
    """A server that refuses every request with a 400 whose message echoes the credentials it was sent."""

    def __init__(self):
        server = self
        self.paths: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                server.paths.append(self.path)
                message = f"bad request from {self.headers.get('Authorization')} at {self.path}"
                data = json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_credentials_a_server_echoes_never_reach_files_or_the_terminal(tmp_path, movie_data, monkeypatch):
    import base64

    server = EchoingServer()
    try:
        key, second, third = PLANTED_KEY, PLANTED_KEY[::-1], "KEY2" + PLANTED_KEY[:8]
        monkeypatch.setenv("OPENAI_API_KEY", key)
        for url in (f"http://{server.host}/v1", f"http://us:p@ss{second}@{server.host}/v1?code={third}"):
            out = tmp_path / str(len(server.paths))
            result = evaluate(out, movie_data, url, "--limit", "2", "--score-failures-as-empty")
            assert result.returncode == 0, result.stderr[-2000:]
            shown = result.stdout + result.stderr
            basic = base64.b64encode(f"us:p@ss{second}".encode()).decode()
            for secret in (key, second, third, basic):
                assert secret not in shown
                for path in (p for p in out.rglob("*") if p.is_file()):
                    assert secret.encode() not in path.read_bytes(), path
            errors = [row["error"] for row in read_jsonl(out / "predictions.jsonl")]
            assert len(errors) == 2 and all(e.startswith("400: bad request from ") for e in errors)
            assert "Bearer ***" in errors[0] or "Basic ***" in errors[0]
        # the URL's query goes with every request, after the path (not cut into it)
        assert server.paths[-1] == f"/v1/chat/completions?code={third}"
    finally:
        server.close()
