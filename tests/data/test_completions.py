"""What is scored of a completion: clean text, reasoning removed, explicit caps, counted in the report."""

import json

from test_metrics import DE_NIRO, KG, MATCHER

from rectune.benchmarks import Resources
from rectune.data.completions import (
    DEFAULT_LIMITS,
    Answer,
    CompletionLimits,
    answer_text,
    clean_text,
    completion_text,
    reasoning_blanked,
)
from rectune.data.titles import TitleMatcher
from rectune.evaluation.report_files import report_problem
from rectune.evaluation.scoring import score_benchmark


def test_clean_text_drops_control_characters_and_replaces_lone_surrogates():
    assert clean_text("a\x00b\x07c\td\ne") == "abc\td\ne"
    assert clean_text("caf\udce9 é") == "caf\ufffd é"
    assert clean_text("Heat (1995)") == "Heat (1995)"


def test_reasoning_blocks_are_removed():
    assert answer_text("<think>Heat? no.</think>\n1. Ronin (1998)").text == "\n\n1. Ronin (1998)"
    assert answer_text("<THINK>x</THINK>Heat").text == "\nHeat"
    assert answer_text("still thinking <think> Heat (1995)").text == "still thinking \n"  # never answered
    assert answer_text("reasoning opened in the prompt</think>Heat").text == "Heat"
    assert not answer_text("Heat").reasoning_removed and answer_text("<think></think>Heat").reasoning_removed


def test_reasoning_is_blanked_in_place_where_offsets_must_hold():
    assert reasoning_blanked("<think>Heat?</think>Ronin") == "\n" * 20 + "Ronin"
    assert reasoning_blanked("opened in the prompt</think>Heat") == "\n" * 28 + "Heat"
    assert reasoning_blanked("Heat <think>x</think>[SEP] Ronin") == "Heat " + "\n" * 16 + "[SEP] Ronin"
    assert reasoning_blanked("<think>never closed: Heat") == "\n" * 25
    assert reasoning_blanked("Heat [SEP] Ronin") == "Heat [SEP] Ronin"


def test_a_long_reasoning_block_no_longer_hides_the_answer():
    thought = "<think>" + "hmm " * 10_000 + "</think>\n"  # 40,000 characters, over the 20,000 cap
    scored = answer_text(thought + "1. Heat (1995)\n2. Ronin (1998)")
    assert not scored.truncated and scored.text.strip() == "1. Heat (1995)\n2. Ronin (1998)"
    report, _ = score_benchmark([DE_NIRO], {"a": thought + "1. Heat (1995)\n2. Ronin (1998)"}, loaded())
    # both ground-truth items, both meet the two conditions: P = R = CMR = 1, not a refusal
    assert report["overall"]["recall"] == 1.0 and report["overall"]["ftr"] == 0.0
    assert report["completions"]["reasoning_removed"] == 1 and report["completions"]["cut_at_max_chars"] == 0
    assert report_problem(json.loads(json.dumps(report))) is None  # compare reads it back as written


def test_caps_are_settings_and_their_cuts_are_counted():
    limits = CompletionLimits(max_chars=20, max_mentions=1)
    assert answer_text("x" * 25, limits) == Answer("x" * 20, reasoning_removed=False, truncated=True)
    completion = "1. Heat (1995)\n2. Ronin (1998)"  # 30 characters: the cut at 20 keeps "1. Heat (1995)\n2. Ro"
    report, _ = score_benchmark([DE_NIRO], {"a": completion}, loaded(limits))
    # one mention counted ("Ro" resolves to nothing; the cap of 1 keeps Heat only): P = 1, R = 1/2
    assert report["overall"]["precision"] == 1.0 and report["overall"]["recall"] == 0.5
    assert report["completions"] == {
        "scored": 1,
        "reasoning_removed": 0,
        "cut_at_max_chars": 1,
        "cut_at_max_mentions": 1,
        "max_chars": 20,
        "max_mentions": 1,
    }


def test_rewards_read_the_answer_too():
    assert completion_text([{"role": "assistant", "content": "<think>x</think>Heat\x00"}]) == "\nHeat"
    assert completion_text({"content": None}) == "" and completion_text(42) == ""


def loaded(limits=DEFAULT_LIMITS):
    return Resources.loaded(TitleMatcher(MATCHER.items.values(), limits=limits), KG, limits=limits)
