"""What a body is made of, read from its bytes and its JSON alone (not from how a generator made it).

Used to say which kinds of bodies the device lane leaves to the native core (``bench.lane_share``)
and, in the tests, to check a corpus's shares without trusting its generator's own counts.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

OBJECTS = ("chat.completion", "chat.completion.chunk", "text_completion")
_BODY_U_ESCAPE = re.compile(rb"(?:^|[^\\])(?:\\\\)*\\u")
"""A ``\\uXXXX`` escape of the body itself: a backslash-u after an even run of backslashes."""


def traits(value: bytes) -> list[str]:
    """The traits of one body: its kind, layout and escapes, its first choice's content and tools."""
    try:
        body = json.loads(value.decode("utf-8"))  # json.loads(bytes) would let UTF-8 surrogates through
    except ValueError:  # UnicodeDecodeError included
        return ["broken"]
    if not isinstance(body, dict):
        return ["broken"]
    return [f"kind: {kind(body)}", *_layout(value, body), *_choice(body)]


def kind(body: dict[str, Any]) -> str:
    """The body's ``object``, ``error`` for an error body, ``other`` otherwise."""
    if body.get("object") == "error" or body.get("error") is not None:
        return "error"
    obj = body.get("object")
    return obj if isinstance(obj, str) and obj in OBJECTS else "other"


def _layout(value: bytes, body: dict[str, Any]) -> list[str]:
    found = []
    if value.startswith(b"{\n"):
        found.append("layout: indented, sorted keys" if list(body) == sorted(body) else "layout: indented")
    if _BODY_U_ESCAPE.search(value):
        found.append("body: \\u escapes")
    if not value.isascii():
        found.append("body: raw non-ASCII")
    return found


def _choice(body: dict[str, Any]) -> list[str]:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return []
    choice = choices[0]
    message = choice.get("message") if "message" in choice else choice.get("delta")
    message = message if isinstance(message, dict) else {}
    text = message.get("content") if "message" in choice or "delta" in choice else choice.get("text")
    found = _content(text) if isinstance(text, str) else []
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        found.append("tool call")
        arguments = calls[0].get("function", {}).get("arguments") if isinstance(calls[0], dict) else None
        if isinstance(arguments, str):
            found += _escapes("tool arguments", arguments)
    if any(isinstance(message.get(k), str) and message.get(k) for k in ("reasoning", "reasoning_content")):
        found.append("reasoning field")
    return found


def _content(text: str) -> list[str]:
    """Prose, ``<think>`` prose, or JSON (fenced, indented, with escapes of its own)."""
    stripped = text.strip(" \t\r\n")
    fenced = stripped.startswith("```")
    if fenced:
        stripped = stripped.partition("\n")[2].rstrip(" \t\r\n").removesuffix("```").strip(" \t\r\n")
    if not stripped.startswith(("{", "[")):
        return ["content: think" if text.startswith("<think>") else "content: prose"]
    found = ["content: JSON"]
    found += ["content JSON: fenced"] * fenced + ["content JSON: indented"] * ("\n" in stripped)
    return found + _escapes("content JSON", stripped)


def _escapes(what: str, json_text: str) -> list[str]:
    r"""Whether JSON held in a string has escapes of its own, and ``\u`` ones among them."""
    if "\\" not in json_text:
        return []
    return [f"{what}: escapes"] + [f"{what}: \\u escapes"] * ("\\u" in json_text)


def count(values: Iterable[bytes]) -> Counter[str]:
    """How many bodies have each trait."""
    counts: Counter[str] = Counter()
    for value in values:
        counts.update(traits(value))
    return counts
