"""With response_format the content is JSON valid for the requested schema."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import openai
import pytest

from llmpipe.record import DEFAULT_CONTENT_SCHEMA
from vllm_sim.schema_gen import generate

DEFAULT_SCHEMA: dict[str, Any] = json.loads(DEFAULT_CONTENT_SCHEMA.read_text())

EXTRA_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 5},
            "x": {"type": "number", "minimum": -2.5, "maximum": -1},
            "tags": {
                "type": "array",
                "items": {"type": "string", "maxLength": 5},
                "minItems": 2,
                "maxItems": 3,
            },
            "inner": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
            "maybe": {"type": ["string", "null"]},
            "pick": {"anyOf": [{"type": "integer", "minimum": 10, "maximum": 10}, {"const": "ten"}]},
        },
        "required": ["n", "x", "tags", "inner", "maybe", "pick"],
        "additionalProperties": False,
    },
]


def _format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "assessment", "schema": schema, "strict": True}}


def test_json_schema_content_is_valid(client: openai.OpenAI) -> None:
    for i in range(100):
        reply = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": f"assess {i}"}],
            response_format=_format(DEFAULT_SCHEMA),  # type: ignore[arg-type]
            n=2,
        )
        for choice in reply.choices:
            jsonschema.validate(json.loads(choice.message.content or ""), DEFAULT_SCHEMA)
            assert choice.finish_reason == "stop"


def test_json_object_content_is_an_object(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)


@pytest.mark.parametrize("schema", [DEFAULT_SCHEMA, *EXTRA_SCHEMAS])
def test_generator_respects_bounds(schema: dict[str, Any]) -> None:
    for seed in range(300):
        jsonschema.validate(generate(schema, random.Random(seed)), schema)
