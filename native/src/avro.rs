//! Avro binary encoding of typed rows, planned once from the record schema the Python side derives
//! (`TypedRecord.avro`, the one schema of design §4): fields are written in that schema's order and
//! each field name is bound to the column that fills it. Output is byte-identical to
//! `fastavro.schemaless_writer` (arrays and maps as one block plus the zero terminator).

use crate::content::{Content, Kind, Typed, Validator};
use crate::extract::{BodyRow, ChoiceRow};
use crate::json::{parse, Value};

/// Values of one row that come from the Kafka record rather than the body.
pub struct MetaRow<'m> {
    pub request_id: Option<&'m str>,
    pub latency_ms: Option<i64>,
    pub attributes: Option<&'m [(String, String)]>,
    pub raw_partition: i64,
    pub raw_offset: i64,
    pub ingest_ts: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Col {
    RequestId,
    CompletionId,
    Object,
    Created,
    Model,
    FinishReason,
    StopReason,
    ContentText,
    Reasoning,
    ToolName,
    ToolArguments,
    ToolArgumentsValid,
    NumChoices,
    Choices,
    PromptTokens,
    CompletionTokens,
    TotalTokens,
    CachedTokens,
    LatencyMs,
    Attributes,
    SystemFingerprint,
    ServiceTier,
    Metadata,
    Extra,
    Content,
    ContentValid,
    ContentError,
    RawPartition,
    RawOffset,
    IngestTs,
    /// A nullable field this encoder has no column for: always null.
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Str,
    Long,
    Int,
    Bool,
    StrMap,
    Choices,
    Content,
}

fn column(name: &str) -> Option<(Col, Shape)> {
    use Col::*;
    Some(match name {
        "request_id" => (RequestId, Shape::Str),
        "completion_id" => (CompletionId, Shape::Str),
        "object" => (Object, Shape::Str),
        "created" => (Created, Shape::Long),
        "model" => (Model, Shape::Str),
        "finish_reason" => (FinishReason, Shape::Str),
        "stop_reason" => (StopReason, Shape::Str),
        "content_text" => (ContentText, Shape::Str),
        "reasoning" => (Reasoning, Shape::Str),
        "tool_name" => (ToolName, Shape::Str),
        "tool_arguments" => (ToolArguments, Shape::Str),
        "tool_arguments_valid" => (ToolArgumentsValid, Shape::Bool),
        "num_choices" => (NumChoices, Shape::Int),
        "choices" => (Choices, Shape::Choices),
        "prompt_tokens" => (PromptTokens, Shape::Long),
        "completion_tokens" => (CompletionTokens, Shape::Long),
        "total_tokens" => (TotalTokens, Shape::Long),
        "cached_tokens" => (CachedTokens, Shape::Long),
        "latency_ms" => (LatencyMs, Shape::Long),
        "attributes" => (Attributes, Shape::StrMap),
        "system_fingerprint" => (SystemFingerprint, Shape::Str),
        "service_tier" => (ServiceTier, Shape::Str),
        "metadata" => (Metadata, Shape::StrMap),
        "extra" => (Extra, Shape::StrMap),
        "content" => (Content, Shape::Content),
        "content_valid" => (ContentValid, Shape::Bool),
        "content_error" => (ContentError, Shape::Str),
        "raw_partition" => (RawPartition, Shape::Int),
        "raw_offset" => (RawOffset, Shape::Long),
        "ingest_ts" => (IngestTs, Shape::Long),
        _ => return None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChoiceCol {
    Index,
    FinishReason,
    Content,
}

#[derive(Debug, Clone, Copy)]
struct ContentCol {
    prop: usize,
    array: bool,
}

/// The write plan of one record schema.
#[derive(Debug, Clone)]
pub struct Plan {
    top: Vec<Col>,
    choice: Vec<ChoiceCol>,
    content: Vec<ContentCol>,
}

/// `["null", T]` → `T`.
fn nullable<'o, 'v>(t: &'o Value<'v>) -> Option<&'o Value<'v>> {
    match t {
        Value::Arr(branches) if branches.len() == 2 && branches[0] == Value::Str("null".into()) => Some(&branches[1]),
        _ => None,
    }
}

/// The primitive or complex type name of `t` (`{"type": "long", "logicalType": ...}` is `long`).
fn type_name<'o>(t: &'o Value<'_>) -> Option<&'o str> {
    match t {
        Value::Str(s) => Some(s.as_ref()),
        Value::Obj(o) => match o.get("type") {
            Some(Value::Str(s)) => Some(s.as_ref()),
            _ => None,
        },
        _ => None,
    }
}

fn field_list<'o, 'v>(record: &'o Value<'v>) -> Option<Vec<(&'o str, &'o Value<'v>)>> {
    let Value::Obj(o) = record else { return None };
    if type_name(record) != Some("record") {
        return None;
    }
    let Some(Value::Arr(fields)) = o.get("fields") else { return None };
    fields
        .iter()
        .map(|f| match f {
            Value::Obj(f) => match (f.get("name"), f.get("type")) {
                (Some(Value::Str(n)), Some(t)) => Some((n.as_ref(), t)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn inner<'o, 'v>(t: &'o Value<'v>, key: &str) -> Option<&'o Value<'v>> {
    match t {
        Value::Obj(o) => o.get(key),
        _ => None,
    }
}

impl Plan {
    /// Bind the fields of `avro_schema` (JSON text) to columns; the content record to `validator`'s
    /// properties. Refuses shapes this encoder does not write.
    pub fn new(avro_schema: &str, validator: &Validator) -> Result<Plan, String> {
        let schema = parse(avro_schema).map_err(|_| "Avro schema is not JSON".to_string())?;
        let fields = field_list(&schema).ok_or("the top-level Avro schema must be a record")?;
        let mut plan = Plan { top: Vec::new(), choice: Vec::new(), content: Vec::new() };
        for (name, t) in fields {
            let Some(t) = nullable(t) else {
                return Err(format!("field {name}: only [\"null\", T] fields are supported"));
            };
            let Some((col, shape)) = column(name) else {
                plan.top.push(Col::Null);
                continue;
            };
            plan.bind(name, t, shape, validator)?;
            plan.top.push(col);
        }
        Ok(plan)
    }

    fn bind(&mut self, name: &str, t: &Value<'_>, shape: Shape, validator: &Validator) -> Result<(), String> {
        let bad = || format!("field {name}: unexpected Avro type");
        let is = |want: &str| type_name(t) == Some(want);
        let ok = match shape {
            Shape::Str => is("string"),
            Shape::Long => is("long"),
            Shape::Int => is("int"),
            Shape::Bool => is("boolean"),
            Shape::StrMap => is("map") && inner(t, "values").and_then(nullable).and_then(type_name) == Some("string"),
            Shape::Choices => {
                let item = inner(t, "items").and_then(nullable).ok_or_else(bad)?;
                self.choice = choice_plan(item).ok_or_else(bad)?;
                is("array")
            }
            Shape::Content => {
                self.content = content_plan(t, validator).ok_or_else(bad)?;
                true
            }
        };
        ok.then_some(()).ok_or_else(bad)
    }
}

fn choice_plan(record: &Value<'_>) -> Option<Vec<ChoiceCol>> {
    field_list(record)?
        .into_iter()
        .map(|(name, t)| {
            let t = type_name(nullable(t)?)?;
            match (name, t) {
                ("index", "int") => Some(ChoiceCol::Index),
                ("finish_reason", "string") => Some(ChoiceCol::FinishReason),
                ("content", "string") => Some(ChoiceCol::Content),
                _ => None,
            }
        })
        .collect()
}

fn avro_scalar(kind: Kind) -> &'static str {
    match kind {
        Kind::String => "string",
        Kind::Number => "double",
        Kind::Integer => "long",
        Kind::Boolean => "boolean",
    }
}

fn content_plan(record: &Value<'_>, validator: &Validator) -> Option<Vec<ContentCol>> {
    let names: Vec<&str> = validator.names().collect();
    field_list(record)?
        .into_iter()
        .map(|(name, t)| {
            let prop = names.iter().position(|n| *n == name)?;
            let t = nullable(t)?;
            let want = avro_scalar(validator.kind(prop));
            let array = validator.is_array(prop);
            let found = if array { type_name(inner(t, "items").and_then(nullable)?)? } else { type_name(t)? };
            (found == want && (type_name(t) == Some("array")) == array).then_some(ContentCol { prop, array })
        })
        .collect()
}

/// Zig-zag varint of a long.
#[inline]
fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut zz = ((v << 1) ^ (v >> 63)) as u64;
    while zz > 0x7f {
        out.push((zz as u8 & 0x7f) | 0x80);
        zz >>= 7;
    }
    out.push(zz as u8);
}

#[inline]
fn put_str(out: &mut Vec<u8>, s: &str) {
    put_long(out, s.len() as i64);
    out.extend_from_slice(s.as_bytes());
}

#[inline]
pub fn opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            out.push(2);
            put_str(out, s);
        }
    }
}

#[inline]
pub fn opt_long(out: &mut Vec<u8>, v: Option<i64>) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(2);
            put_long(out, v);
        }
    }
}

#[inline]
fn opt_bool(out: &mut Vec<u8>, v: Option<bool>) {
    match v {
        None => out.push(0),
        Some(b) => out.extend_from_slice(&[2, u8::from(b)]),
    }
}

/// A nullable map of nullable strings, given as its entries (one block, then the terminator).
pub fn opt_map<K: AsRef<str>, V: AsRef<str>>(out: &mut Vec<u8>, entries: Option<&[(K, V)]>) {
    let Some(entries) = entries else {
        out.push(0);
        return;
    };
    out.push(2);
    if !entries.is_empty() {
        put_long(out, entries.len() as i64);
        for (k, v) in entries {
            put_str(out, k.as_ref());
            out.push(2);
            put_str(out, v.as_ref());
        }
    }
    out.push(0);
}

fn put_typed(out: &mut Vec<u8>, t: &Typed) {
    match t {
        Typed::Str(s) => put_str(out, s),
        Typed::Double(x) => out.extend_from_slice(&x.to_le_bytes()),
        Typed::Long(v) => put_long(out, *v),
        Typed::Bool(b) => out.push(u8::from(*b)),
        Typed::Array(items) => {
            if !items.is_empty() {
                put_long(out, items.len() as i64);
                for item in items {
                    out.push(2);
                    put_typed(out, item);
                }
            }
            out.push(0);
        }
    }
}

impl Plan {
    /// Append the Avro datum of one row to `out`.
    pub fn write(&self, out: &mut Vec<u8>, body: &BodyRow<'_>, meta: &MetaRow<'_>) {
        for col in &self.top {
            self.write_col(out, *col, body, meta);
        }
    }

    fn write_col(&self, out: &mut Vec<u8>, col: Col, body: &BodyRow<'_>, meta: &MetaRow<'_>) {
        match col {
            Col::RequestId => opt_str(out, meta.request_id),
            Col::CompletionId => opt_str(out, Some(body.completion_id)),
            Col::Object => opt_str(out, Some(body.object)),
            Col::Created => opt_long(out, Some(body.created)),
            Col::Model => opt_str(out, body.model),
            Col::FinishReason => opt_str(out, body.finish_reason),
            Col::StopReason => opt_str(out, body.stop_reason.as_deref()),
            Col::ContentText => opt_str(out, body.content_text),
            Col::Reasoning => opt_str(out, body.reasoning),
            Col::ToolName => opt_str(out, body.tool_name),
            Col::ToolArguments => opt_str(out, body.tool_arguments.as_deref()),
            Col::ToolArgumentsValid => opt_bool(out, body.tool_arguments_valid),
            Col::NumChoices => opt_long(out, Some(body.choices.len() as i64)),
            Col::Choices => self.write_choices(out, &body.choices),
            Col::PromptTokens => opt_long(out, body.prompt_tokens),
            Col::CompletionTokens => opt_long(out, body.completion_tokens),
            Col::TotalTokens => opt_long(out, body.total_tokens),
            Col::CachedTokens => opt_long(out, body.cached_tokens),
            Col::LatencyMs => opt_long(out, meta.latency_ms),
            Col::Attributes => opt_map(out, meta.attributes),
            Col::SystemFingerprint => opt_str(out, body.system_fingerprint),
            Col::ServiceTier => opt_str(out, body.service_tier),
            Col::Metadata => opt_map(out, body.metadata.as_deref()),
            Col::Extra => opt_map(out, Some(body.extra.as_slice())),
            Col::Content => self.write_content(out, &body.content),
            Col::ContentValid => opt_bool(
                out,
                match body.content {
                    Content::Prose => None,
                    Content::Invalid(_) => Some(false),
                    Content::Valid(_) => Some(true),
                },
            ),
            Col::ContentError => opt_str(
                out,
                match &body.content {
                    Content::Invalid(code) => Some(code.as_str()),
                    _ => None,
                },
            ),
            Col::RawPartition => opt_long(out, Some(meta.raw_partition)),
            Col::RawOffset => opt_long(out, Some(meta.raw_offset)),
            Col::IngestTs => opt_long(out, meta.ingest_ts),
            Col::Null => out.push(0),
        }
    }

    fn write_choices(&self, out: &mut Vec<u8>, choices: &[ChoiceRow<'_>]) {
        out.push(2);
        if !choices.is_empty() {
            put_long(out, choices.len() as i64);
            for choice in choices {
                out.push(2);
                for col in &self.choice {
                    match col {
                        ChoiceCol::Index => opt_long(out, choice.index),
                        ChoiceCol::FinishReason => opt_str(out, choice.finish_reason),
                        ChoiceCol::Content => opt_str(out, choice.content),
                    }
                }
            }
        }
        out.push(0);
    }

    fn write_content(&self, out: &mut Vec<u8>, content: &Content) {
        let Content::Valid(values) = content else {
            out.push(0);
            return;
        };
        out.push(2);
        for col in &self.content {
            match &values[col.prop] {
                None => out.push(0),
                Some(t) => {
                    debug_assert_eq!(matches!(t, Typed::Array(_)), col.array);
                    out.push(2);
                    put_typed(out, t);
                }
            }
        }
    }
}

/// A header's `attributes` object as map entries (strings as is, other values as JSON text).
pub fn attribute_entries(value: &[u8]) -> Option<Vec<(String, String)>> {
    let text = std::str::from_utf8(value).ok()?;
    let Value::Obj(obj) = parse(text).ok()? else { return None };
    let entries = crate::extract::string_map(&obj, "attributes").ok()?;
    Some(entries.into_iter().map(|(k, v)| (k.to_string(), v.into_owned())).collect())
}
