"""Deterministic rewards for the GRPO tests, named on the command line by dotted path (tests.grpo_rewards.NAME)."""

from rectune.data.completions import completion_text


def length(completions, **kwargs) -> list[float]:
    """A tenth of the completion's length in characters: varies between sampled completions."""
    return [len(completion_text(c)) / 10 for c in completions]


def constant(completions, **kwargs) -> list[float]:
    """1.0 whatever the completion: no completion is better than another, so no advantage and no gradient."""
    return [1.0 for _ in completions]
