"""What RecTune prints quotes strangers (a server's error text, a model folder's settings and template): the
characters a terminal acts on instead of showing (OSC 52 writes the clipboard, CSI 2J clears the screen,
OSC 0 retitles the window, U+202E shows the line backwards) reach the terminal as visible escapes."""

import json
import logging

from conftest import model_with_template, run_script
from test_hostile import evaluate, raw, send  # noqa: F401 (raw: the fixture of hostile servers)

from rectune.core.cli import run
from rectune.core.escaping import terminal_text

CLIPBOARD = "\x1b]52;c;cHduZWQ=\x07"  # OSC 52: "pwned" into the clipboard, in terminals that allow it
CLEAR_AND_RETITLE = "\x1b[2J\x1b]0;owned\x07"
ACTING = ("\x1b", "\x07", "\u202e")


def test_terminal_text_escapes_what_a_terminal_would_act_on_and_keeps_the_rest():
    text = f"a{CLIPBOARD}b\tc\nd\u202ee\ud800 \u200d\x85\x7f é 👍🏽"
    assert terminal_text(text) == "a\\x1b]52;c;cHduZWQ=\\x07b\tc\nd\\u202ee\\ud800 \u200d\\x85\\x7f é 👍🏽"
    assert terminal_text(7) == "7"


def test_a_servers_error_text_reaches_the_terminal_escaped(raw, tmp_path, movie_data):  # noqa: F811
    message = f"bad {CLIPBOARD}{CLEAR_AND_RETITLE} request \u202ekcatta"
    endpoint = raw(lambda handler, n: send(handler, json.dumps({"error": {"message": message}}).encode(), status=500))
    result = evaluate(tmp_path / "r", movie_data, endpoint.url, "--max-retries", "0")
    assert result.returncode == 2
    assert not any(char in result.stderr for char in ACTING), ascii(result.stderr[-600:])
    assert result.stderr.splitlines()[-1] == (
        f"error: fake-model at {endpoint.url}: 500 bad \\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\x1b]0;owned\\x07 request "
        "\\u202ekcatta after 1 try; the answers so far are kept: rerun to resume"
    )


def test_a_model_folders_template_error_reaches_the_terminal_escaped(tmp_path, tiny_model, movie_data):
    """A template that refuses RecTune's prompts is quoted in the one-line error: its message is a stranger's."""
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "2", "--limit", "1", "--no-wandb")
    refusing = model_with_template(tmp_path / "refusing", tiny_model, f'{{{{ raise_exception("{CLIPBOARD}no") }}}}')
    refused = run_script("evaluate/run.py", "--model", refusing, "--out", tmp_path / "t", *args, check=False)
    assert refused.returncode == 2
    assert not any(char in refused.stderr for char in ACTING), ascii(refused.stderr[-600:])
    assert refused.stderr.splitlines()[-1].endswith(": \\x1b]52;c;cHduZWQ=\\x07no"), refused.stderr[-300:]


def test_every_log_line_of_a_script_is_escaped_whichever_handler_prints_it():
    """Scripts log warnings quoting data files and model folders; a library's own handler prints them too."""
    printed = []

    class Collect(logging.Handler):
        def emit(self, record):
            printed.append(self.format(record))

    logger = logging.getLogger("rectune.test_terminal_text")
    logger.addHandler(Collect())
    try:
        run(lambda: logger.warning("%s: holds no records", f"data/{CLEAR_AND_RETITLE}"))
    finally:
        logging.setLogRecordFactory(logging.LogRecord)
    assert printed == ["data/\\x1b[2J\\x1b]0;owned\\x07: holds no records"]
