"""One loader for the content JSON Schema: every command refuses the same schemas, with the same words."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpu_stage.transform.contract.content import ContentValidator
from llmpipe import content_schema
from llmpipe.content_schema import DEFAULT_CONTENT_SCHEMA, load_content_schema
from llmpipe.errors import ConfigError
from llmpipe.record import TypedRecord, content_row
from vllm_sim import schema_gen

NESTED_OBJECT = {"type": "object", "properties": {"o": {"type": "object"}}}
"""What the connector used to send and gpu_stage refused: a property that is itself an object."""
NESTED_PROBLEM = 'property "o": type "object" is not supported (string, number, integer, boolean, or an array of one)'

RICH = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["a", "b"], "minLength": 1, "maxLength": 5},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "count": {"type": "integer", "minimum": -3, "maximum": 40},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3},
        "_v2": {"type": "integer", "const": 2},
    },
    "required": ["label", "score"],
    "additionalProperties": False,
}


def _prop(**prop: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"p": prop}}


BAD: list[tuple[str, str]] = [
    ("[1, 2]", "must hold a JSON Schema object, not an array"),
    ("{", "is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    ('{"type": "object", "properties": {"x": {"type": "number", "minimum": NaN}}}',
     "is not JSON (NaN is not a JSON value)"),
    ('{"type": "object", "properties": {"x": {"type": "string"}, "x": {"type": "integer"}}}',
     'the key "x" is given twice in one object'),
    (json.dumps({"type": "array", "items": {"type": "string"}}), '"type" must be "object", not "array"'),
    (json.dumps({"properties": {"a": {"type": "string"}}}), '"type" must be "object", not null'),
    (json.dumps({"type": "object"}), '"properties" must be an object with at least one property'),
    (json.dumps({"type": "object", "properties": {}}), '"properties" must be an object with at least one property'),
    (json.dumps(NESTED_OBJECT), NESTED_PROBLEM),
    (json.dumps({"type": "object", "properties": {"risk level": {"type": "string"}}}),
     'property "risk level": the name must be letters, digits and \'_\', not starting with a digit '
     "(an Avro field name)"),
    (json.dumps({"type": "object", "properties": {"p": "string"}}), 'property "p": must be an object, not "string"'),
    (json.dumps(_prop(type=["string", "null"])),
     'property "p": type an array is not supported (string, number, integer, boolean, or an array of one)'),
    (json.dumps(_prop(anyOf=[{"type": "string"}])),
     'property "p": type null is not supported (string, number, integer, boolean, or an array of one)'),
    (json.dumps(_prop(type="array", items={"type": "object"})),
     'property "p": "items" must be an object whose type is one of string, number, integer, boolean, not "object"'),
    (json.dumps(_prop(type="array")),
     'property "p": "items" must be an object whose type is one of string, number, integer, boolean, '
     "not no item schema"),
    (json.dumps(_prop(type="string", minimum=3)), 'property "p": minimum needs type number or integer, not string'),
    (json.dumps(_prop(type="number", maximum="1")), 'property "p": maximum must be a finite number, not "1"'),
    (json.dumps(_prop(type="number", minimum=True)), 'property "p": minimum must be a finite number, not true'),
    ('{"type": "object", "properties": {"p": {"type": "number", "maximum": 1e999}}}',
     'property "p": maximum must be a finite number, not Infinity'),
    (json.dumps(_prop(type="integer", minimum=5, maximum=1)),
     'property "p": the lower bound 5 is above the upper bound 1'),
    (json.dumps(_prop(type="string", minLength=-1)), 'property "p": minLength must be an integer >= 0, not -1'),
    (json.dumps(_prop(type="string", minLength=4, maxLength=2)), 'property "p": minLength 4 is above maxLength 2'),
    (json.dumps(_prop(type="array", items={"type": "string"}, minItems=3, maxItems=1)),
     'property "p": minItems 3 is above maxItems 1'),
    (json.dumps(_prop(type="array", items={"type": "string"}, enum=[["a"]])),
     'property "p": enum and const are supported on scalar properties only'),
    (json.dumps(_prop(type="array", items={"type": "integer", "maximum": "x"})),
     'property "p" items: maximum must be a finite number, not "x"'),
    (json.dumps(_prop(type="string", enum=[])), 'property "p": enum must be a non-empty array'),
    (json.dumps(_prop(type="string", enum=["a", 1])), 'property "p": enum value 1 is not of type string'),
    (json.dumps(_prop(type="integer", enum=[1, 2.5])), 'property "p": enum value 2.5 is not of type integer'),
    (json.dumps(_prop(type="boolean", const=1)), 'property "p": const value 1 is not of type boolean'),
    (json.dumps({**_prop(type="string"), "required": "p"}), '"required" must be an array of property names'),
    (json.dumps({**_prop(type="string"), "required": ["q"]}),
     '"required" names "q", which is not a property (no record could be valid)'),
]  # fmt: skip


def _write(tmp_path: Path, text: str, name: str = "schema.json") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("text", "problem"), BAD, ids=[problem[:60] for _, problem in BAD])
def test_a_bad_schema_is_one_line_naming_option_path_and_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as refused:
        load_content_schema(path, "--content-schema")
    assert str(refused.value) == f"--content-schema {path}: {problem}"
    assert "\n" not in str(refused.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as missing:
        load_content_schema(tmp_path / "nope.json", "--content-schema")
    assert str(missing.value) == (
        f"--content-schema {tmp_path / 'nope.json'}: cannot be read (No such file or directory)"
    )
    with pytest.raises(ConfigError) as folder:
        load_content_schema(tmp_path, "--content-schema")
    assert str(folder.value) == f"--content-schema {tmp_path}: cannot be read (Is a directory)"
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"type": "object", "properties": {"caf\xe9": {"type": "string"}}}')
    with pytest.raises(ConfigError) as encoded:
        load_content_schema(latin, "--content-schema")
    assert str(encoded.value) == f"--content-schema {latin}: is not UTF-8 text (invalid continuation byte at byte 38)"


def test_the_default_is_the_bundled_file_and_passes() -> None:
    assert load_content_schema(None, "--content-schema") == json.loads(DEFAULT_CONTENT_SCHEMA.read_text())
    assert load_content_schema("", "--content-schema") == load_content_schema(DEFAULT_CONTENT_SCHEMA, "x")


def test_a_rich_schema_is_accepted_by_every_consumer(tmp_path: Path) -> None:
    """What the loader accepts, the typed record and gpu_stage's validator compile, and every value the
    simulator generates for it is valid content."""
    path = _write(tmp_path, json.dumps(RICH))
    loaded = load_content_schema(path, "--content-schema")
    assert loaded == RICH
    assert [f.name for f in content_row(loaded).fields] == ["label", "score", "count", "ok", "tags", "_v2"]
    validator = ContentValidator(loaded)
    rng = random.Random(5)
    for _ in range(200):
        value = schema_gen.generate(loaded, rng)
        assert validator.validate(value)[0] is None, value
    assert TypedRecord.from_file(path).content_schema == RICH


def test_what_gpu_stage_refused_is_now_refused_by_every_command_in_the_same_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("JOBS_CONTENT_SCHEMA", "GPU_STAGE_CONTENT_SCHEMA", "CONNECTOR_CONTENT_SCHEMA",
                 "CONTENT_SCHEMA", "CONNECTOR_JSON_SCHEMA"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    path = _write(tmp_path, json.dumps(NESTED_OBJECT))
    prompts = _write(tmp_path, "", "prompts.jsonl")
    with pytest.raises(ConfigError, match="unsupported type 'object'"):
        ContentValidator(NESTED_OBJECT)  # the worker's own validator refuses it too

    from connector.__main__ import main as connector
    from gpu_stage.__main__ import main as gpu_stage
    from jobs.user_risk import main as user_risk

    runs: list[tuple[str, Callable[[Sequence[str]], int], list[str]]] = [
        ("connector", connector, ["--input-file", str(prompts), "--content-schema", str(path)]),
        ("gpu_stage", gpu_stage, ["--content-schema", str(path)]),
        ("jobs.user_risk", user_risk, ["--content-schema", str(path)]),
    ]
    for command, main, argv in runs:
        option = argv[-2]
        assert main(argv) == 2
        assert capsys.readouterr().err == f"{command}: {option} {path}: {NESTED_PROBLEM}\n"


def test_loaded_once_per_file_version_and_each_caller_gets_its_own_copy(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps(RICH))
    content_schema._load.cache_clear()
    first = load_content_schema(path, "--content-schema")
    first["properties"]["label"]["enum"].append("c")
    second = TypedRecord.from_file(path).content_schema
    info = content_schema._load.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    assert second == RICH
    changed = {**RICH, "required": ["label"]}
    path.write_text(json.dumps(changed))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert load_content_schema(path, "--content-schema")["required"] == ["label"]
    assert content_schema._load.cache_info().misses == 2
