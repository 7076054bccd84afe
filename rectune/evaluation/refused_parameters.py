"""Request parameters a model refuses by name, and the ones that can be sent otherwise with the same meaning.

OpenAI's reasoning models (the o-series, GPT-5) answer a request carrying ``max_tokens`` with a 400,
``Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens'
instead.`` (``"param": "max_tokens"``), and some of them refuse ``top_p`` whatever its value. Every other
server RecTune is pointed at (vLLM, SGLang, ``transformers serve``, DeepSeek, Mistral) takes ``max_tokens``,
and Mistral's refuses fields it does not know. So requests carry ``max_tokens``; where a server refuses it by
name, the same limit goes as ``max_completion_tokens`` from then on, and a refused ``top_p`` of 1, which cuts
nothing, is left out (as is a temperature of 1 refused by name, as o1 did: 1 is the API's default).
Google's OpenAI-compatible Gemini endpoint refuses ``seed`` (``Unknown name "seed": Cannot find field.``, in
a body that is a list), and Mistral's API, which names it ``random_seed``, answers it with a 422
(``extra_forbidden`` at ``["body", "seed"]``): the seed is left out, which changes no answer's distribution,
only whether a sampled one can be drawn again. A refused temperature other than 1 has no such stand-in: a
model that samples only at temperature 1 cannot answer greedily, and whether to score its samples is the
user's choice.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

CHANGES = {
    "max_tokens": "max_tokens sent as max_completion_tokens",
    "top_p": "top_p 1 left out",
    "temperature": "temperature 1 left out",
    "seed": "seed left out",
}
_NAMED = re.compile(r"[Uu]nsupported parameter: '(\w+)'|Unknown name \"(\w+)\"")


def error_object(error_body: Any) -> dict:
    """The error of a 4xx body: OpenAI's ``{"error": {...}}``, a bare ``{"message"}``, or Google's list of one."""
    body = error_body[0] if isinstance(error_body, list) and error_body else error_body
    body = body if isinstance(body, dict) else {}
    return body["error"] if isinstance(body.get("error"), dict) else body


def refused_parameter(error_body: Any) -> str | None:
    """The parameter whose presence a 400's or 422's body refuses: OpenAI's ``error.param`` where its ``code``
    is ``unsupported_parameter``, else its message's ``Unsupported parameter: 'NAME'`` (proxies pass the message
    on without the fields) or Google's ``Unknown name "NAME"``, else a pydantic ``extra_forbidden`` entry at
    ``["body", NAME]`` (Mistral's, in its message's ``detail`` or in that message as JSON text; a FastAPI
    server's, Azure's for Mistral models, in the body's own). A value refused (a prompt and ``max_tokens`` past
    the context, a temperature) names no parameter here."""
    error = error_object(error_body)
    if isinstance(error.get("param"), str) and error.get("code") == "unsupported_parameter":
        return error["param"]
    found = _NAMED.search(str(error.get("message", "")))
    if found:
        return found.group(1) or found.group(2)
    message = error.get("message")
    if isinstance(message, str) and message.startswith("{"):  # Mistral's proxy wrote its detail as JSON text
        with contextlib.suppress(ValueError, RecursionError):
            message = json.loads(message)
    details = (message if isinstance(message, dict) else error).get("detail")
    for detail in details if isinstance(details, list) else []:
        kind, where = (detail.get("type"), detail.get("loc")) if isinstance(detail, dict) else (None, None)
        if kind == "extra_forbidden" and isinstance(where, list) and len(where) == 2 and where[0] == "body":
            return str(where[1])
    return None


def resendable(body: dict, parameter: str) -> dict | None:
    """``body`` without ``parameter`` and with the same meaning, or None where no such body exists."""
    if parameter == "max_tokens" and "max_tokens" in body:
        return {("max_completion_tokens" if key == "max_tokens" else key): value for key, value in body.items()}
    if parameter in ("top_p", "temperature") and body.get(parameter) == 1.0 or parameter == "seed" and "seed" in body:
        return {key: value for key, value in body.items() if key != parameter}
    return None


def refused_temperature(error_body: Any) -> bool:
    """Whether a 400's body refuses the request's temperature (OpenAI's ``error.param``)."""
    return error_object(error_body).get("param") == "temperature"


def without_refused(body: dict, refused: set[str]) -> dict:
    """``body`` as sent to a server known to refuse the parameters ``refused``."""
    for parameter in sorted(refused):
        body = resendable(body, parameter) or body
    return body
