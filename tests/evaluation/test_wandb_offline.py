"""An evaluation logging to W&B with no key configured logs offline and says so, instead of failing after
it has scored (as training does)."""

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import run_script
from test_endpoint import ScriptedEndpoint
from test_grounding import prepare
from test_hostile import evaluate

from rectune.core.io import RecTuneError
from rectune.core.wandb_mode import has_wandb_key, wandb_host


def two_answers_logged(tmp_path, movie_data):
    """The report folder and the run of an evaluation of two queries through a local server, logged to W&B."""
    endpoint = ScriptedEndpoint(["ok"] * 2)
    try:
        return tmp_path / "r", evaluate(tmp_path / "r", movie_data, endpoint.url, "--limit", "2", wandb=True)
    finally:
        endpoint.close()


def test_an_evaluation_without_a_wandb_key_logs_offline(tmp_path, movie_data, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))  # no `wandb login` either
    out, result = two_answers_logged(tmp_path, movie_data)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "no W&B API key found: logging offline" in result.stderr
    assert any(p.name.startswith("offline-run-") for p in (out / "wandb").iterdir())


class RefusingWandb(http.server.BaseHTTPRequestHandler):
    """A W&B server that refuses every key, as W&B's does a revoked one."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"errors": [{"message": "user is not logged in"}]}')

    def log_message(self, *_):
        pass


@pytest.mark.parametrize("server", ["none listening", "refusing the key"])
def test_an_evaluation_whose_wandb_server_cannot_be_used_logs_offline(tmp_path, movie_data, monkeypatch, server):
    """A key in the environment and no W&B server to reach (an air-gapped cluster), or one refusing the key: wandb.init
    raised CommError (after its init_timeout, where nothing answers), a traceback once every query had been scored."""
    refusing = http.server.HTTPServer(("127.0.0.1", 0), RefusingWandb)
    port = refusing.server_address[1]
    if server == "none listening":
        refusing.server_close()  # the port of this machine it held: nothing listens there now
    else:
        threading.Thread(target=refusing.serve_forever, daemon=True).start()
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "3")  # W&B's own setting; 90 s by default
    try:
        out, result = two_answers_logged(tmp_path, movie_data)
    finally:
        if server != "none listening":
            refusing.shutdown()
            refusing.server_close()
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    said = "Timed out while retrying:" if server == "none listening" else "user is not logged in"
    assert f"W&B could not start the run online ({said}" in result.stderr, result.stderr[-2000:]
    assert "logging offline (upload later with `wandb sync`)" in result.stderr
    assert (out / "report.json").is_file()
    assert any(p.name.startswith("offline-run-") for p in (out / "wandb").iterdir())


def test_a_wandb_project_wandb_refuses_stops_the_evaluation_before_it_scores(tmp_path, movie_data):
    """wandb.init refused it once every query had been scored: a traceback at the end."""
    endpoint = ScriptedEndpoint(["ok"] * 2)
    try:
        result = evaluate(tmp_path / "r", movie_data, endpoint.url, "--wandb-project", "team/recsys", wandb=True)
    finally:
        endpoint.close()
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        "error: --wandb-project: Invalid project name 'team/recsys': cannot contain characters '/,\\\\,#,?,%,:', "
        "found '/'"
    ), result.stderr[-1000:]
    assert not (tmp_path / "r").exists() and endpoint.requests == []


def test_an_evaluation_that_changes_nothing_opens_no_new_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    prepare(tmp_path / "data", "--test-size", "0.5")
    out = tmp_path / "popularity"
    args = (
        "evaluate/run.py",
        "--model",
        "baseline:popularity",
        "--data",
        tmp_path / "data" / "test.jsonl",
        "--out",
        out,
    )
    first = run_script(*args)
    said = first.stdout + first.stderr
    assert f"W&B: run baseline:popularity-data saved offline in {out / 'wandb'}/offline-run-" in said
    assert "wandb:" not in said  # W&B's own banner, summary and sync hints stay out of the terminal
    again = run_script(*args)  # every answer resumed, the same scores
    assert f"W&B: the same scores were logged from {out} before; no new run" in again.stdout
    assert len([p for p in (out / "wandb").iterdir() if p.name.startswith("offline-run-")]) == 1
    run_script(*args, "--metrics", "official")  # other scores of the same answers: a run of their own
    assert len([p for p in (out / "wandb").iterdir() if p.name.startswith("offline-run-")]) == 2


def test_a_wandb_run_cut_short_counts_as_none_and_the_rerun_logs_the_scores(tmp_path, monkeypatch):
    """Killed while W&B logged (or W&B's disk full), the folder's ``wandb/`` had counted as logged: the rerun said
    "the same scores were logged" and W&B never got them."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    prepare(tmp_path / "data", "--test-size", "0.5")
    out = tmp_path / "popularity"
    data = tmp_path / "data" / "test.jsonl"
    args = ("evaluate/run.py", "--model", "baseline:popularity", "--data", data, "--out", out)
    killed = run_script(*args, fault="wandb:started", check=False)
    assert killed.returncode == -9 and (out / "report.json").is_file() and (out / "wandb").is_dir()
    assert not (out / "wandb_logged.json").exists()
    again = run_script(*args)
    assert f"W&B: run baseline:popularity-data saved offline in {out / 'wandb'}/offline-run-" in again.stdout
    assert len([p for p in (out / "wandb").iterdir() if p.name.startswith("offline-run-")]) == 2
    assert "no new run" in run_script(*args).stdout  # now it finished: recorded


def test_a_logged_record_of_another_shape_is_no_logged_run(tmp_path):
    from rectune.evaluation.tracking import LOGGED, logged_scores, scores_digest

    assert logged_scores(tmp_path) is None
    for text in ("[1, 2]", "not json", '"a string"', '{"scores_sha256": 7}'):
        (tmp_path / LOGGED).write_text(text)
        assert logged_scores(tmp_path) is None
    report = {"overall": {"n": 1}, "config": {"predictions_key": "k"}}
    (tmp_path / LOGGED).write_text(json.dumps({"scores_sha256": scores_digest(report)}))
    assert logged_scores(tmp_path) == scores_digest(report)
    assert scores_digest({**report, "overall": {"n": 2}}) != scores_digest(report)


def test_a_netrc_of_no_utf8_or_unreadable_is_searched_as_bytes_or_counts_as_none(tmp_path, monkeypatch):
    """Read as text, a .netrc holding a Latin-1 password was a UnicodeDecodeError at the start of every run."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))  # W&B's cloud: no settings file says else
    netrc = tmp_path / ".netrc"
    monkeypatch.setenv("NETRC", str(netrc))
    netrc.write_bytes(b"machine api.wandb.ai login user password caf\xe9\n")
    assert has_wandb_key()
    netrc.write_bytes(b"machine example.org login user password caf\xe9\n")
    assert not has_wandb_key()
    netrc.unlink()
    netrc.mkdir()  # not a file: no key there
    assert not has_wandb_key()


def wandb_login(*flags: str) -> None:
    """W&B's own `wandb login`, writing its .netrc and settings file where the environment points."""
    wandb = Path(sys.executable).with_name("wandb")
    key = "0123456789abcdef0123456789abcdef01234567"
    subprocess.run([wandb, "login", "--no-verify", *flags, key], check=True, capture_output=True, env=os.environ)


def test_a_key_wandb_login_saved_is_found_for_the_host_wandb_logs_to(tmp_path, monkeypatch):
    """`wandb login` (0.31) saves the cloud's key for api.forge.coreweave.com, and `--host` a server's for its own
    host: a search for api.wandb.ai alone logged both users' runs offline."""
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert not has_wandb_key()
    wandb_login()
    assert b"machine api.forge.coreweave.com" in (tmp_path / "netrc").read_bytes() and has_wandb_key()
    (tmp_path / "netrc").unlink()
    wandb_login("--host", "https://wandb.acme.example")  # a W&B server of one's own: its settings file too
    assert wandb_host() == "wandb.acme.example" and has_wandb_key()
    monkeypatch.setenv("WANDB_BASE_URL", "https://other.example")  # the environment comes first, as in wandb.init
    assert wandb_host() == "other.example" and not has_wandb_key()
    monkeypatch.setenv("WANDB_IDENTITY_TOKEN_FILE", str(tmp_path / "token"))  # W&B's other credential
    assert has_wandb_key()
    monkeypatch.setenv("WANDB_BASE_URL", "not a url")  # pydantic's ValidationError, a traceback as W&B started
    with pytest.raises(RecTuneError, match="^W&B refuses a WANDB_ setting of the environment: 1 validation error"):
        wandb_host()


def test_a_disk_filling_as_wandb_logs_is_one_line_and_records_no_logged_run(tmp_path, monkeypatch):
    """W&B's run in the report folder, on a disk that fills as it copies the per-query table in: W&B's threads
    went on, failing to write, about 230 lines of logging errors after the traceback."""
    import errno

    import wandb

    from rectune.evaluation import tracking

    monkeypatch.setenv("WANDB_MODE", "offline")

    def table_to_a_full_disk(run, report, table_rows):
        raise OSError(errno.ENOSPC, "No space left on device", "/tmp/t.json", None, f"{tmp_path}/wandb/t.json")

    monkeypatch.setattr(tracking, "_log_scores", table_to_a_full_disk)
    report = {"config": {"data": str(tmp_path / "data" / "test.jsonl"), "checkpoint": "m"}, "overall": {"n": 1}}
    with pytest.raises(RecTuneError) as refused:
        tracking.log_to_wandb(tmp_path, report, [], "rectune")
    assert str(refused.value) == (
        f"{tmp_path}: no space left on the device for W&B's run ([Errno 28] No space left on device: '/tmp/t.json' -> "
        f"'{tmp_path}/wandb/t.json'); the report is written: free some and rerun to log it"
    )
    assert tracking.logged_scores(tmp_path) is None
    assert wandb.run is None  # finished, its threads wound down
