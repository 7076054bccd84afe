"""A run that pushes to the Hub: its repository made before the model loads, or one line; an upload that fails as
the run ends leaves the stage saved and finished here, with one line saying how to upload it."""

import http.server
import json
import socket
import threading
import time

import pytest
from conftest import run_script
from test_training import sft_recipe

from rectune.models.hub import HUB_TIMEOUT_S

WRITER, READER = "hf_writer0123456789", "hf_reader0123456789"  # the tokens the local Hub knows


class LocalHub(http.server.BaseHTTPRequestHandler):
    """The Hub's answers to the calls a push makes: a repository made for a token that may write (401 without a
    token, as the Hub answers, 403 for one that may only read); every upload refused, as a Hub a network
    dropped from would leave it."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if self.path != "/api/repos/create":
            self.answer(403, {"error": "uploads are refused here"})
        elif token == WRITER:
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            self.answer(200, {"url": f"{base}/someone/tiny-rec", "name": "someone/tiny-rec"})
        else:
            self.answer(403 if token == READER else 401, {"error": "Invalid credentials in Authorization header"})

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *_):
        pass


@pytest.fixture
def hub():
    server = http.server.HTTPServer(("127.0.0.1", 0), LocalHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def push(tmp_path, tiny_model, train_data, endpoint, token=None, **env):
    recipe = sft_recipe(tmp_path / "s.yaml", tiny_model, train_data, tmp_path / "sft", max_steps=1)
    env = {
        "HF_ENDPOINT": endpoint,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_TOKEN": token or "",
        "HF_HUB_OFFLINE": "0",
        **env,
    }
    return run_script("train/sft.py", recipe, "--push_to_hub", "--hub_model_id", "someone/tiny-rec", check=False,
                      env=env, timeout=600)  # fmt: skip


@pytest.mark.parametrize(
    ("token", "said"),
    [(None, "the Hub has no login of yours (no token, or one it refuses)"),
     (READER, "your login may not create or write to it")],
)  # fmt: skip
def test_a_push_the_hub_refuses_is_one_line_before_the_model_loads(tmp_path, tiny_model, train_data, hub, token, said):
    """transformers made the repository once the model had loaded: an HTTP error's traceback."""
    result = push(tmp_path, tiny_model, train_data, hub, token)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: push_to_hub: cannot make the Hub repository someone/tiny-rec: {said}; log in with `hf auth login` "
        "(or set HF_TOKEN), or train without push_to_hub"
    )
    assert "Loading weights" not in result.stderr and not (tmp_path / "sft").exists()


def test_a_push_with_no_hub_to_reach_is_one_line(tmp_path, tiny_model, train_data, hub):
    """A traceback of the HTTP stack's, once the model had loaded."""
    closed = http.server.HTTPServer(("127.0.0.1", 0), LocalHub)
    closed.server_close()  # nothing listens on its port now
    result = push(tmp_path, tiny_model, train_data, f"http://127.0.0.1:{closed.server_address[1]}", WRITER)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: push_to_hub: the Hub cannot be reached to make someone/tiny-rec ("), last
    with socket.create_server(("127.0.0.1", 0)) as silent:  # takes the connection, never answers: a dropped route
        start = time.monotonic()
        result = push(tmp_path, tiny_model, train_data, f"http://127.0.0.1:{silent.getsockname()[1]}", WRITER)
        waited = time.monotonic() - start
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: push_to_hub: the Hub cannot be reached to make someone/tiny-rec ("), last
    assert waited < HUB_TIMEOUT_S + 30, waited  # the deadline and the script's start, not forever
    offline = push(tmp_path, tiny_model, train_data, hub, WRITER, HF_HUB_OFFLINE="1")
    assert offline.returncode == 2, offline.stderr[-3000:]
    assert offline.stderr.strip().splitlines()[-1] == (
        "error: push_to_hub: HF_HUB_OFFLINE is set, so nothing can be uploaded to someone/tiny-rec"
    )
    assert not (tmp_path / "sft").exists()


def test_an_upload_that_fails_at_the_end_leaves_the_stage_finished(tmp_path, tiny_model, train_data, hub):
    """The upload inside save_model raised before finished.json was written: a traceback after training, and a
    rerun trained nothing but uploaded again."""
    result = push(tmp_path, tiny_model, train_data, hub, WRITER)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    out = tmp_path / "sft"
    assert (out / "finished.json").is_file() and (out / "adapter_model.safetensors").is_file()
    warning = next(line for line in result.stderr.splitlines() if "upload to the Hub failed" in line)
    assert "uploads are refused here" in warning, warning
    assert warning.endswith(f"`hf upload someone/tiny-rec {out} --exclude 'checkpoint-*' --exclude 'merged/*'`")
    again = push(tmp_path, tiny_model, train_data, f"http://127.0.0.1:{1}", WRITER)  # finished: the Hub is not asked
    assert again.returncode == 0 and "stage finished at step 1; nothing to do" in again.stdout, again.stderr[-3000:]
