"""Each completion token's share of the completion's text, for credit given token by token (shaping.py).

A token decoded alone is not its share of the text. A byte-level BPE writes a character outside its merges
("千", an emoji, SmolLM2's "Ç") in several tokens, each of which decodes alone to U+FFFD; a SentencePiece
tokenizer whose decoder strips the space that opens a text (Llama 2's, Mistral's) drops every word's
space. Joined, such pieces were another text than the one the rewards read: a title in CJK script
resolved to nothing, and with Mistral's tokenizer "Heat [SEP] Jaws" became "Heat[SEP]Jaws".

Here a token's piece is what decoding it after the token before adds, held back while the text ends
inside a character (vLLM's incremental detokenization): the pieces join into the text TRL decodes for the
rewards, at two short decodes a token.
"""

from __future__ import annotations

import os
from typing import Any

REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that are not yet a whole character


def token_pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """Per token of ``ids``, the text it adds to ``tokenizer.decode(ids, skip_special_tokens=True)``, which the
    pieces join into: ``""`` for a token that completes no character (the first byte of "千") or writes nothing
    (a special token), the whole character on the token that completes it."""
    pieces = []
    start = read = 0  # ids[start:read]: the tokens decoded last, the context the next piece is decoded after
    for end in range(1, len(ids) + 1):
        before = tokenizer.decode(ids[start:read], skip_special_tokens=True)
        after = tokenizer.decode(ids[start:end], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith(REPLACEMENT):
            pieces.append(after[len(before) :])
            start, read = read, end
        else:
            pieces.append("")
    return _ending_as_decoded(pieces, tokenizer.decode(ids, skip_special_tokens=True))


def _ending_as_decoded(pieces: list[str], text: str) -> list[str]:
    """``pieces`` whose end is made ``text``'s: a completion cut inside a character ends in U+FFFD as decoded
    (held back above), and a byte-fallback decoder writes U+FFFD for each byte of the whole run of byte
    tokens that holds it ("千" then half of "と": four), where the pieces wrote "千"."""
    joined = "".join(pieces)
    common = len(os.path.commonprefix([joined, text]))
    excess = len(joined) - common
    for i in reversed(range(len(pieces))):  # what the pieces wrote past the common start goes, from the end
        if not excess:
            break
        cut = min(excess, len(pieces[i]))
        pieces[i], excess = pieces[i][: len(pieces[i]) - cut], excess - cut
    if pieces:
        pieces[-1] += text[common:]
    return pieces
