"""GRPO's table of sampled completions (``log_completions``), printed with what a terminal would act on escaped.

TRL prints the table through ``rich``, which strips a bell or a carriage return but passes the escape character
on: a completion (a stranger's model writes what it likes) or a prompt holding ``ESC ] 52`` wrote the user's
clipboard, ``ESC [ 2 J`` cleared the screen. Here TRL's own printer is handed copies whose texts went through
:func:`~rectune.core.escaping.terminal_text`; the W&B table and the ``completions/`` parquet files keep the
texts as they were sampled.
"""

from __future__ import annotations

from typing import Any

from transformers.utils import is_rich_available
from trl.trainer.utils import print_prompt_completions_sample

from rectune.core.escaping import terminal_text

TEXT_FIELDS = ("role", "content", "reasoning_content", "thinking", "text")


def terminal_entry(entry: Any) -> Any:
    """A prompt or completion as TRL's table reads it (a string, or chat messages whose texts may be lists of
    typed blocks), every text in it escaped for a terminal; anything else as it is."""
    if isinstance(entry, str):
        return terminal_text(entry)
    if isinstance(entry, list):
        return [terminal_entry(part) for part in entry]
    if isinstance(entry, dict):
        return {key: terminal_entry(value) if key in TEXT_FIELDS else value for key, value in entry.items()}
    return entry


class EscapedCompletionTable:
    """A GRPO trainer mixin: TRL's ``log`` without its table, then the same table of escaped copies."""

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        shown, self.num_completions_to_print = self.num_completions_to_print, 0  # TRL's printer shows none at 0
        try:
            super().log(logs, start_time)
        finally:
            self.num_completions_to_print = shown
        if self.accelerator.is_main_process and self.log_completions and is_rich_available():
            extra = self._logs["extra"]
            print_prompt_completions_sample(
                [terminal_entry(prompt) for prompt in self._logs["prompt"]],
                [terminal_entry(completion) for completion in self._logs["completion"]],
                self._logs["rewards"],
                self._logs["advantages"],
                self.state.global_step,
                shown,
                extra={name: [terminal_entry(value) for value in values] for name, values in extra.items()},
            )
