"""Fence stripping and the compiled content validator (checked against jsonschema)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_stage.transform.contract.content import ContentValidator, json_candidate, parse_tool_arguments
from llmpipe.errors import ConfigError
from llmpipe.record import TypedRecord

SCHEMA = TypedRecord.from_file().content_schema
VALIDATOR = ContentValidator(SCHEMA)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a":1}', '{"a":1}'),
        ('  \n{"a":1}\n ', '{"a":1}'),
        ('```json\n{"a":1}\n```', '{"a":1}'),
        ('```JSON\n{"a":1}\n```  ', '{"a":1}'),
        ("```\n[1]\n```", "[1]"),
        ('```json\n{"a":', '{"a":'),
        ("```python\nprint(1)\n```", None),
        ("Here:\n```json\n{}\n```", None),
        ("", None),
        ("```", None),
        ("\u00a0{}", None),
        ("plain text", None),
    ],
)
def test_json_candidate(text: str, expected: str | None) -> None:
    assert json_candidate(text) == expected


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"city": "Paris"}', ('{"city":"Paris"}', True)),
        ('{"a": [1, 2.50]}', ('{"a":[1,2.5]}', True)),
        ("[1, 2]", ("[1, 2]", False)),
        ('{"ci', ('{"ci', False)),
        ("", ("", False)),
        (None, (None, None)),
        ({"a": 1}, ('{"a":1}', True)),
    ],
)
def test_tool_arguments(arguments: Any, expected: tuple[str | None, bool | None]) -> None:
    assert parse_tool_arguments(arguments) == expected


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-2, 2, allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=4,
)
CANDIDATES = st.fixed_dictionaries(
    {},
    optional={
        "sentiment": st.sampled_from(["positive", "neutral", "negative", "other"]) | JSONISH,
        "score": st.floats(-0.5, 1.5, allow_nan=False) | st.integers(-1, 2) | JSONISH,
        "risk_level": st.sampled_from(["low", "medium", "high", "x"]) | JSONISH,
        "topics": st.lists(st.text(max_size=3) | st.integers(), max_size=3) | JSONISH,
        "needs_review": st.booleans() | JSONISH,
        "other": JSONISH,
    },
)


@settings(max_examples=300, deadline=None)
@given(CANDIDATES)
def test_validator_agrees_with_jsonschema(value: dict[str, Any]) -> None:
    error, row = VALIDATOR.validate(value)
    assert (error is None) == jsonschema.Draft202012Validator(SCHEMA).is_valid(value)
    if error is None:
        assert row is not None
        assert set(row) == set(value)
        if "score" in value:
            assert row["score"] == float(value["score"])
            assert isinstance(row["score"], float)


def test_first_violation_order() -> None:
    # Required properties first (in `required` order), then unknown keys, then schema order.
    assert VALIDATOR.validate({"zzz": 1}) == ("missing:sentiment", None)
    assert VALIDATOR.validate({"sentiment": 1, "score": 0, "risk_level": "low", "zzz": 1}) == (
        "additional:zzz",
        None,
    )
    assert VALIDATOR.validate({"sentiment": 1, "score": 9, "risk_level": "x"}) == ("type:sentiment", None)


def test_integer_accepts_integral_floats() -> None:
    validator = ContentValidator({"type": "object", "properties": {"n": {"type": "integer"}}})
    assert validator.validate({"n": 3.0}) == (None, {"n": 3})
    assert validator.validate({"n": 3.5}) == ("type:n", None)
    assert validator.validate({"n": True}) == ("type:n", None)


def test_unsupported_schema_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        ContentValidator({"type": "object", "properties": {"o": {"type": "object"}}})
