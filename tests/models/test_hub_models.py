"""A model id that is neither a folder here nor in the Hugging Face cache is one line within seconds,
offline or with the Hub out of reach, for evaluation and training, and no output folder is left."""

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from conftest import ROOT, write_recipe
from test_hostile import one_line

UNKNOWN = "Qwen/Qwen9-3B-Instruct"


def run_with(env: dict, *args) -> subprocess.CompletedProcess:
    full = {**os.environ, **env}
    for name, value in env.items():
        if value is None:
            full.pop(name, None)
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=ROOT, env=full)


# CI sets both: the Hub client is offline if either is
ONLINE = {"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None}
# offline as CI runs; and "online" with the Hub pointed at a closed local port (no network here either way)
WORLDS = {
    "offline": ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
    "transformers offline": ({"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": "1"}, "TRANSFORMERS_OFFLINE is set"),
    "hub unreachable": ({**ONLINE, "HF_ENDPOINT": "http://127.0.0.1:9"}, "the Hub cannot be reached"),
}


@pytest.mark.parametrize("world", sorted(WORLDS))
def test_an_unknown_model_is_one_line_for_evaluation_and_training(tmp_path, movie_data, train_data, world):
    env, words = WORLDS[world]
    start = time.monotonic()
    result = run_with(env, ROOT / "evaluate/run.py", "--model", UNKNOWN, "--data", movie_data / "test.jsonl",
                      "--out", tmp_path / "report", "--no-wandb")  # fmt: skip
    one_line(result, UNKNOWN, words)
    recipe = write_recipe(
        tmp_path / "sft.yaml", model_name_or_path=UNKNOWN, output_dir=str(tmp_path / "run"), max_steps=1,
        report_to=["none"], datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
    )  # fmt: skip
    one_line(run_with(env, ROOT / "train/sft.py", recipe), UNKNOWN, words)
    assert time.monotonic() - start < 60  # seconds each, not a minute of retries
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sft.yaml"]  # no report or run folder left behind


@pytest.mark.parametrize(
    ("hub", "transformers", "named"),
    [(None, None, None), ("1", None, "HF_HUB_OFFLINE"), (None, "true", "TRANSFORMERS_OFFLINE"),
     ("0", "1", None), ("", "1", "TRANSFORMERS_OFFLINE"), ("yes", "1", "HF_HUB_OFFLINE")],
)  # fmt: skip
def test_the_offline_variable_named_is_the_one_the_hub_client_obeys(monkeypatch, hub, transformers, named):
    from rectune.models.hub import hub_offline_variable

    env = {"HF_HUB_OFFLINE": hub, "TRANSFORMERS_OFFLINE": transformers}
    for variable, value in env.items():
        monkeypatch.delenv(variable, raising=False)
        if value is not None:
            monkeypatch.setenv(variable, value)
    assert hub_offline_variable() == named
    client = run_with(env, "-c", "import huggingface_hub.constants as c; print(c.HF_HUB_OFFLINE)")
    assert client.stdout.strip() == str(named is not None)


def test_the_hub_clients_requests_end_when_the_hub_stops_answering(monkeypatch):
    """huggingface_hub's shared client waits without end (`timeout=None`): a push's uploads, and the stage's save
    they are part of, hung on a Hub that had stopped answering while the run trained."""
    import httpx2
    import huggingface_hub.constants
    from huggingface_hub.utils import get_session

    import rectune.models.hub as hub

    session = get_session()
    before = session.timeout
    monkeypatch.setattr(hub, "HUB_READ_TIMEOUT_S", 0.5)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # CI's: every request refused at once
    try:
        hub.bound_hub_requests()
        outcome = []

        def upload(url):
            try:
                get_session().post(url)
            except httpx2.ReadTimeout:
                outcome.append("timed out")

        with socket.create_server(("127.0.0.1", 0)) as silent:  # takes the connection, never answers
            url = f"http://127.0.0.1:{silent.getsockname()[1]}/api/models/a/b/preupload/main"
            asking = threading.Thread(target=upload, args=(url,), daemon=True)
            asking.start()
            asking.join(timeout=10)  # unbounded, it waits until the socket closes
        assert outcome == ["timed out"]
        assert get_session().timeout.connect == hub.HUB_TIMEOUT_S
        hub.bound_hub_requests(hub.HUB_TIMEOUT_S)  # before the run starts, as the repository is made
        assert get_session().timeout.read == hub.HUB_TIMEOUT_S == 10.0
    finally:
        session.timeout = before


def test_a_cached_hub_model_is_read_from_its_snapshot_and_fingerprinted_by_its_files(tmp_path, monkeypatch):
    """A resume compares the base model's files: a Hub id's are the cached snapshot's, the one `refs/main` names."""
    import huggingface_hub.constants

    from rectune.models.fingerprints import model_fingerprint, model_record
    from rectune.models.hub import local_model_folder

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub/models--org--tiny"
    for commit in ("a" * 40, "b" * 40):
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text(f'{{"revision": "{commit[0]}"}}')
    (repo / "refs").mkdir()
    (repo / "refs/main").write_text("b" * 40)
    assert local_model_folder("org/tiny") == repo / "snapshots" / ("b" * 40)
    assert local_model_folder("org/elsewhere") is None and local_model_folder("not an id!") is None
    assert local_model_folder(str(tmp_path)) == tmp_path

    folder = repo / "snapshots" / ("b" * 40)
    (folder / "README.md").write_text("a card")  # the card and hidden files are not the model
    (folder / ".lock").write_text("")
    record = model_record(folder)
    size, mtime = 17, (folder / "config.json").stat().st_mtime_ns
    assert record == {"files": [f"config.json {size} {mtime}"], "sha256": model_fingerprint(folder)}
    # files of the same sizes and times: the earlier hash is taken as it is, the 6 GB of a 3B model not read again
    assert model_record(folder, {**record, "sha256": "earlier"})["sha256"] == "earlier"
    os.utime(folder / "config.json", ns=(mtime, mtime + 1))  # the same bytes, touched: hashed again, the same
    assert model_record(folder, {**record, "sha256": "earlier"})["sha256"] == record["sha256"]
    assert model_record(folder, ["not", "a", "record"])["sha256"] == record["sha256"]
    (folder / os.fsdecode(b"notes-caf\xe9.txt")).write_text("")  # a name of no UTF-8, written as its bytes read
    assert model_record(folder)["files"][1].startswith("notes-caf\\xe9.txt 0 ")


GATED = "someone/gated-model"


class GatedHub(http.server.BaseHTTPRequestHandler):
    """The Hub's answers for a gated model the caller has no access to: its page public (``gated``), its files
    and its access check refused with the Hub's ``X-Error-Code: GatedRepo``."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.split("?")[0] in (f"/api/models/{GATED}", f"/api/models/{GATED}/revision/main"):
            self.answer(200, {"id": GATED, "gated": "manual", "private": False, "sha": "a" * 40, "siblings": []})
        else:
            self.answer(403, {"error": f"Access to model {GATED} is restricted, you are not authorized."})

    do_HEAD = do_GET

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        if status == 403:
            self.send_header("X-Error-Code", "GatedRepo")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, *_):
        pass


def test_a_gated_model_the_login_may_not_download_is_one_line(tmp_path, movie_data):
    """Meta's and Google's models are gated: the Hub's model page answered, and from_pretrained's OSError was a
    traceback once the files were asked for, after a screen of the Hub client's request lines."""
    hub = http.server.HTTPServer(("127.0.0.1", 0), GatedHub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    env = {**ONLINE, "HF_ENDPOINT": f"http://127.0.0.1:{hub.server_address[1]}",
           "HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": "hf_without_access"}  # fmt: skip
    try:
        result = run_with(env, ROOT / "evaluate/run.py", "--model", GATED, "--data", movie_data / "test.jsonl",
                          "--out", tmp_path / "report", "--no-wandb")  # fmt: skip
    finally:
        hub.shutdown()
        hub.server_close()
    one_line(result, GATED, "a gated model on the Hugging Face Hub that your login may not download")
    assert "HTTP Request" not in result.stderr and not (tmp_path / "report").exists()
