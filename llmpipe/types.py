"""A tiny SQL type algebra: the one source from which Avro schemas and Flink DDL are both generated.

Flink's ``avro`` format derives the Avro schema from the table DDL (``AvroSchemaConverter``): nullable
types become ``["null", T]`` with null first, ``TIMESTAMP(3)`` becomes ``timestamp-millis`` (legacy
mapping, Flink's default), nested rows become records named ``<parent>_<field>``, array elements and
map values are nullable unless declared ``NOT NULL``. Writing our schema the same way means Flink reads
our bytes with no registry and no hand-copied schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FLINK_RECORD_NAME = "org.apache.flink.avro.generated.record"

AvroSchema = str | dict[str, Any] | list[Any]


@dataclass(frozen=True, slots=True)
class Scalar:
    """A scalar SQL type and its Avro counterpart."""

    sql: str
    avro: str
    logical: str | None = None

    def ddl(self) -> str:
        """SQL spelling of the type."""
        return self.sql

    def avro_type(self, name: str) -> AvroSchema:
        """Avro type, before nullability is applied."""
        del name
        if self.logical is None:
            return self.avro
        return {"type": self.avro, "logicalType": self.logical}


STRING = Scalar("STRING", "string")
INT = Scalar("INT", "int")
BIGINT = Scalar("BIGINT", "long")
DOUBLE = Scalar("DOUBLE", "double")
BOOLEAN = Scalar("BOOLEAN", "boolean")
TIMESTAMP3 = Scalar("TIMESTAMP(3)", "long", "timestamp-millis")


@dataclass(frozen=True, slots=True)
class Array:
    """ARRAY<T>; elements are nullable, as in Flink's default."""

    element: SqlType

    def ddl(self) -> str:
        """SQL spelling of the type."""
        return f"ARRAY<{self.element.ddl()}>"

    def avro_type(self, name: str) -> AvroSchema:
        """Avro array with nullable items."""
        return {"type": "array", "items": nullable(self.element.avro_type(name))}


@dataclass(frozen=True, slots=True)
class StringMap:
    """MAP<STRING, STRING>; Avro maps always have string keys, values are nullable."""

    def ddl(self) -> str:
        """SQL spelling of the type."""
        return "MAP<STRING, STRING>"

    def avro_type(self, name: str) -> AvroSchema:
        """Avro map of nullable strings."""
        del name
        return {"type": "map", "values": nullable("string")}


@dataclass(frozen=True, slots=True)
class Field:
    """A named, always-nullable column (missing data must never make a record unwritable)."""

    name: str
    type: SqlType
    doc: str = ""


@dataclass(frozen=True, slots=True)
class Row:
    """ROW<...>: a nested record."""

    fields: tuple[Field, ...]

    def ddl(self) -> str:
        """SQL spelling of the type, with backquoted names."""
        inner = ", ".join(f"`{f.name}` {f.type.ddl()}" for f in self.fields)
        return f"ROW<{inner}>"

    def avro_type(self, name: str) -> AvroSchema:
        """Avro record named the way Flink names nested records."""
        return {
            "type": "record",
            "name": name,
            "fields": [
                {"name": f.name, "type": nullable(f.type.avro_type(f"{name}_{f.name}")), "default": None}
                for f in self.fields
            ],
        }


SqlType = Scalar | Array | StringMap | Row


def nullable(avro: AvroSchema) -> AvroSchema:
    """``["null", T]``: Flink puts the null branch first, and the branch index is on the wire."""
    return ["null", avro]


def avro_schema(row: Row) -> dict[str, Any]:
    """The Avro schema Flink derives for a table whose columns are ``row``'s fields."""
    schema = row.avro_type(FLINK_RECORD_NAME)
    assert isinstance(schema, dict)
    return schema


def ddl_columns(row: Row) -> list[str]:
    """Column definitions for ``CREATE TABLE``, in Avro field order."""
    return [f"`{f.name}` {f.type.ddl()}" for f in row.fields]
