"""GRPO's printed table of completions (log_completions): a model's escape sequences reach no terminal."""

import pandas as pd

from rectune.training.completion_table import terminal_entry
from tests.training.test_shared_prefix import batch_of, grpo_trainer

CLIPBOARD = "\x1b]52;c;aGk=\x1b\\"  # OSC 52 ended by ST: rich strips a bell, not the escape character
CLEAR = "\x1b[2J"


def test_every_text_of_a_prompt_or_completion_is_escaped_and_the_rest_kept():
    messages = [
        {"role": "user", "content": f"hi{CLEAR}"},
        {"role": "assistant", "content": [{"type": "text", "text": "\u202e"}]},
    ]
    assert terminal_entry(messages) == [
        {"role": "user", "content": "hi\\x1b[2J"},
        {"role": "assistant", "content": [{"type": "text", "text": "\\u202e"}]},
    ]
    assert terminal_entry(f"a{CLIPBOARD}\n") == "a\\x1b]52;c;aGk=\\x1b\\\n" and terminal_entry(0.5) == 0.5


def test_a_hostile_completion_is_printed_escaped_and_logged_as_sampled(
    tmp_path, tiny_model, grounded_data, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "20000")  # rich's width: each cell on one line
    trainer = grpo_trainer(tiny_model, grounded_data, tmp_path, log_completions=True, num_completions_to_print=2)
    batch_of(trainer)  # a real rollout fills the trainer's log of prompts and completions
    trainer._logs["completion"][0] = [{"role": "assistant", "content": f"Heat{CLIPBOARD}{CLEAR}"}]
    capsys.readouterr()
    trainer.log({"loss": 0.0})
    printed = capsys.readouterr().out
    assert "Completion" in printed and "\x1b" not in printed  # TRL's table, without one escape character
    trainer.num_completions_to_print = None  # every row shown: the hostile one is among them
    trainer.log({"loss": 0.0})
    printed = capsys.readouterr().out
    assert "Heat\\x1b]52;c;aGk=\\x1b\\\\x1b[2J" in printed and "\x1b" not in printed
    saved = pd.read_parquet(sorted((tmp_path / "completions").glob("*.parquet"))[-1])
    assert saved["completion"][0][0]["content"] == f"Heat{CLIPBOARD}{CLEAR}"  # the file keeps what was sampled
