"""Turn Kubernetes API descriptions into the standalone, strict JSON schemas kubeconform reads.

Two sources, one output layout (kubeconform's ``{{ .ResourceKind }}{{ .KindSuffix }}.json``, i.e.
``{kind}-{group's first label}-{version}.json`` in lower case, ``{kind}-{version}.json`` for the core group):

- a CustomResourceDefinition: one file per served version, from its ``openAPIV3Schema``;
- the Kubernetes OpenAPI v2 document (``api/openapi-spec/swagger.json``): one file per group/version/kind,
  with every ``$ref`` inlined (kubeconform reads one file per kind).

"Strict" is the openapi2jsonschema convention: every object that lists its properties gets
``additionalProperties: false`` unless it says it keeps unknown fields, so a misspelt or misplaced key is an
error rather than silently ignored by the API server's pruning.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Schema = dict[str, Any]
INT_OR_STRING: Schema = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
QUANTITY: Schema = {"oneOf": [{"type": "string"}, {"type": "number"}]}
QUANTITY_REF = "io.k8s.apimachinery.pkg.api.resource.Quantity"


def file_name(kind: str, api_version: str) -> str:
    """The file kubeconform looks up for ``kind`` at ``api_version`` (``group/version`` or ``version``)."""
    group, _, version = api_version.rpartition("/")
    suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
    return f"{kind}{suffix}.json".lower()


def strict(node: Any) -> Any:
    """A copy of an OpenAPI v3 (CRD) schema node as a strict JSON schema."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    if node.get("x-kubernetes-int-or-string"):
        rest = {k: strict(v) for k, v in node.items() if k not in {"type", "format", "x-kubernetes-int-or-string"}}
        return {**rest, **INT_OR_STRING}
    out = {k: strict(v) for k, v in node.items()}
    if out.get("format") == "int-or-string":
        out.pop("format")
        out.pop("type", None)
        out.update(INT_OR_STRING)
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    keeps_unknown = out.get("x-kubernetes-preserve-unknown-fields") is True
    if "properties" in out and "additionalProperties" not in out and not keeps_unknown:
        out["additionalProperties"] = False
    return out


def crd_schemas(crd: Schema) -> dict[str, Schema]:
    """File name to schema for every served version of a CustomResourceDefinition."""
    spec = crd["spec"]
    kind, group = spec["names"]["kind"], spec["group"]
    out = {}
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        schema = strict(version["schema"]["openAPIV3Schema"])
        schema.setdefault("properties", {})
        for key in ("apiVersion", "kind"):
            schema["properties"].setdefault(key, {"type": "string"})
        schema["properties"].setdefault("metadata", {"type": "object"})
        schema["$schema"] = "http://json-schema.org/draft-07/schema#"
        out[file_name(kind, f"{group}/{version['name']}")] = schema
    return out


class _Inliner:
    """Resolves ``#/definitions/...`` references of an OpenAPI v2 document into one tree per kind."""

    def __init__(self, definitions: dict[str, Schema]) -> None:
        self.definitions = definitions
        self.done: dict[str, Schema] = {}

    def resolve(self, name: str, stack: tuple[str, ...] = ()) -> Schema:
        if name == QUANTITY_REF:
            return dict(QUANTITY)
        if name in stack:  # recursive types (JSONSchemaProps): accept anything below the cycle
            return {}
        if name not in self.done:
            self.done[name] = self.node(self.definitions[name], (*stack, name))
        return self.done[name]

    def node(self, node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [self.node(n, stack) for n in node]
        if not isinstance(node, dict):
            return node
        if isinstance(node.get("$ref"), str):
            return self.resolve(node["$ref"].rsplit("/", 1)[1], stack)
        out = {k: self.node(v, stack) for k, v in node.items() if k != "x-kubernetes-group-version-kind"}
        if out.get("format") == "int-or-string":
            out.pop("format")
            out.pop("type", None)
            out.update(INT_OR_STRING)
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out


def openapi_v2_schemas(document: Schema) -> dict[str, Schema]:
    """File name to schema for every kind the Kubernetes OpenAPI v2 document defines."""
    definitions = document["definitions"]
    inliner = _Inliner(definitions)
    out = {}
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            if "kind" not in definition.get("properties", {}):
                continue
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            schema = dict(inliner.resolve(name))
            schema["$schema"] = "http://json-schema.org/draft-07/schema#"
            out[file_name(gvk["kind"], api_version)] = schema
    return out


def write(schemas: dict[str, Schema], target: Path) -> list[Path]:
    """Write each schema as ``target/<file name>``; the paths written."""
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in sorted(schemas.items()):
        path = target / name
        path.write_text(json.dumps(schema, separators=(",", ":")))
        written.append(path)
    return written


def crds_in(documents: Iterable[Any]) -> list[Schema]:
    """The CustomResourceDefinitions among parsed YAML documents."""
    return [d for d in documents if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]
