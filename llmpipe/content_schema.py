"""The one loader of the content JSON Schema file, with the rules of every part that uses it.

Every command takes it as ``--content-schema`` (env ``CONNECTOR_CONTENT_SCHEMA``,
``GPU_STAGE_CONTENT_SCHEMA``, ``JOBS_CONTENT_SCHEMA``). The same file is sent to vLLM as
``response_format`` (connector), becomes the ``content`` ROW of the typed record and its validators
(gpu_stage: the reference, native and device parsers; the Flink jobs' DDL and Avro), and is answered by
the simulator's value generator. A schema that one of them cannot use must be refused by all of them, at
start and in the same words, rather than by one of them mid-run (or, worse, by none: every record a dead
letter).

Rules, the strictest any of them needs:

* the file is JSON (no ``NaN``/``Infinity``, no key given twice: the native parser keeps another
  duplicate than Python does) and holds an object with ``"type": "object"``;
* ``properties`` is a non-empty object; each name is an Avro field name (``[A-Za-z_][A-Za-z0-9_]*``,
  as the typed record's Avro schema and Flink's ``avro`` format need);
* each property is an object whose ``type`` is ``string``, ``number``, ``integer`` or ``boolean``,
  or ``array`` with ``items`` an object of one of those types;
* ``minimum``/``maximum`` (and the exclusive forms) only on ``number``/``integer``, finite numbers,
  ``minimum <= maximum``; ``minLength``/``maxLength`` on strings and ``minItems``/``maxItems`` on
  arrays are integers >= 0 with the lower not above the upper (the simulator draws within them);
* ``enum`` (scalars only) is a non-empty array and ``const`` a value, each of the property's type
  (the simulator answers with them);
* ``required`` is an array of names of the properties (otherwise no record could ever be valid).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmpipe.errors import ConfigError

DEFAULT_CONTENT_SCHEMA = Path(__file__).with_name("schemas") / "default_content.schema.json"
SCALAR_TYPES = ("string", "number", "integer", "boolean")
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMERIC = ("number", "integer")


def load_content_schema(path: str | Path | None, option: str) -> dict[str, Any]:
    """The checked content schema of ``path`` (the bundled default when None or empty).

    A problem is a :class:`ConfigError` of one line naming ``option``, the path and what is wrong.
    Loaded once per process and file version (path, modification time, size); each caller gets its
    own copy, so no caller can change what the next one sees.
    """
    source = Path(path) if path else DEFAULT_CONTENT_SCHEMA
    try:
        stat = source.stat()
        schema = _load(source.resolve(), stat.st_mtime_ns, stat.st_size)
    except OSError as exc:
        msg = f"{option} {source}: cannot be read ({exc.strerror or exc})"
        raise ConfigError(msg) from exc
    except ConfigError as exc:
        msg = f"{option} {source}: {exc}"
        raise ConfigError(msg) from exc
    return copy.deepcopy(schema)


@functools.lru_cache(maxsize=16)
def _load(path: Path, mtime_ns: int, size: int) -> dict[str, Any]:
    """Read, parse and check one version of the file (the stat fields are only the cache key)."""
    del mtime_ns, size
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"is not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise ConfigError(msg) from exc
    try:
        schema = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:
        msg = f"is not JSON ({exc})"
        raise ConfigError(msg) from exc
    check_content_schema(schema)
    assert isinstance(schema, dict)
    return schema


def _no_constant(name: str) -> Any:
    msg = f"{name} is not a JSON value"
    raise ValueError(msg)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            msg = f"the key {_shown(key)} is given twice in one object"
            raise ConfigError(msg)
        out[key] = value
    return out


def _shown(value: Any) -> str:
    """A JSON value as the file spells it, so the message points at what to fix."""
    return json.dumps(value, ensure_ascii=False)


def _kind_name(value: Any) -> str:
    """JSON's name for the kind of ``value`` (an error says what was found)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return _shown(value)


def check_content_schema(schema: Any) -> None:
    """Raise :class:`ConfigError` (one line, no option or path) for the first rule ``schema`` breaks."""
    if not isinstance(schema, dict):
        msg = f"must hold a JSON Schema object, not {_kind_name(schema)}"
        raise ConfigError(msg)
    if schema.get("type") != "object":
        msg = f'"type" must be "object", not {_kind_name(schema.get("type"))}'
        raise ConfigError(msg)
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        msg = '"properties" must be an object with at least one property'
        raise ConfigError(msg)
    for name, prop in props.items():
        _check_property(name, prop)
    _check_required(schema.get("required", []), props)


def _check_property(name: str, prop: Any) -> None:
    where = f"property {_shown(name)}"
    if not _AVRO_NAME.fullmatch(name):
        msg = f"{where}: the name must be letters, digits and '_', not starting with a digit (an Avro field name)"
        raise ConfigError(msg)
    if not isinstance(prop, dict):
        msg = f"{where}: must be an object, not {_kind_name(prop)}"
        raise ConfigError(msg)
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items")
        if not isinstance(items, dict) or items.get("type") not in SCALAR_TYPES:
            found = _kind_name(items.get("type")) if isinstance(items, dict) else "no item schema"
            msg = f'{where}: "items" must be an object whose type is one of {", ".join(SCALAR_TYPES)}, not {found}'
            raise ConfigError(msg)
        _check_length(where, prop, "minItems", "maxItems")
        if "enum" in prop or "const" in prop:
            msg = f"{where}: enum and const are supported on scalar properties only"
            raise ConfigError(msg)
        _check_scalar(f"{where} items", items, items["type"])
        return
    if kind not in SCALAR_TYPES:
        msg = f"{where}: type {_kind_name(kind)} is not supported ({', '.join(SCALAR_TYPES)}, or an array of one)"
        raise ConfigError(msg)
    _check_scalar(where, prop, kind)


def _check_scalar(where: str, prop: Mapping[str, Any], kind: str) -> None:
    """Bounds, lengths and allowed values of a scalar (a property or an array's items)."""
    _check_bounds(where, prop, kind)
    if kind == "string":
        _check_length(where, prop, "minLength", "maxLength")
    if "enum" in prop:
        values = prop["enum"]
        if not isinstance(values, list) or not values:
            msg = f"{where}: enum must be a non-empty array"
            raise ConfigError(msg)
        for value in values:
            _check_value(where, "enum", value, kind)
    if "const" in prop:
        _check_value(where, "const", prop["const"], kind)


def _finite_number(value: Any) -> bool:
    """A JSON number Python can compare: an int (never a bool), or a finite float (JSON's 1e999 is inf)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _of_kind(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return _finite_number(value) and (isinstance(value, int) or value.is_integer())
    return _finite_number(value)


def _check_value(where: str, keyword: str, value: Any, kind: str) -> None:
    if not _of_kind(value, kind):
        msg = f"{where}: {keyword} value {_shown(value)} is not of type {kind}"
        raise ConfigError(msg)


def _check_bounds(where: str, prop: Mapping[str, Any], kind: str) -> None:
    found: dict[str, float] = {}
    for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if keyword not in prop:
            continue
        value = prop[keyword]
        if kind not in _NUMERIC:
            msg = f"{where}: {keyword} needs type number or integer, not {kind}"
            raise ConfigError(msg)
        if not _finite_number(value):
            msg = f"{where}: {keyword} must be a finite number, not {_shown(value)}"
            raise ConfigError(msg)
        found[keyword] = value
    low = found.get("minimum", found.get("exclusiveMinimum"))
    high = found.get("maximum", found.get("exclusiveMaximum"))
    if low is not None and high is not None and low > high:
        msg = f"{where}: the lower bound {_shown(low)} is above the upper bound {_shown(high)}"
        raise ConfigError(msg)


def _check_length(where: str, prop: Mapping[str, Any], low_key: str, high_key: str) -> None:
    for keyword in (low_key, high_key):
        value = prop.get(keyword, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            msg = f"{where}: {keyword} must be an integer >= 0, not {_shown(value)}"
            raise ConfigError(msg)
    if low_key in prop and high_key in prop and prop[low_key] > prop[high_key]:
        msg = f"{where}: {low_key} {prop[low_key]} is above {high_key} {prop[high_key]}"
        raise ConfigError(msg)


def _check_required(required: Any, props: Mapping[str, Any]) -> None:
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        msg = '"required" must be an array of property names'
        raise ConfigError(msg)
    for name in required:
        if name not in props:
            msg = f'"required" names {_shown(name)}, which is not a property (no record could be valid)'
            raise ConfigError(msg)
