//! One body → typed values or a dead letter, checks in the order of `gpu_stage/transform/contract/semantics.md` §1–§2
//! (the reference is `gpu_stage/transform/contract/extract.py`; texts and order must match it exactly).

use std::borrow::Cow;

use crate::content::{tool_arguments, Content, Validator};
use crate::created::created_ms;
use crate::dump::{dumps, MAX_DUMP_DEPTH};
use crate::json::{Obj, Value};

pub const INVALID_JSON: &str = "invalid_json";
pub const INVALID_UTF8: &str = "invalid_utf8";
pub const NOT_AN_OBJECT: &str = "not_an_object";
pub const MISSING_FIELD: &str = "missing_field";
pub const WRONG_TYPE: &str = "wrong_type";
pub const TOO_LARGE: &str = "too_large";
pub const UPSTREAM_ERROR: &str = "upstream_error";

/// A dead letter's reason code and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadBody {
    pub reason: &'static str,
    pub text: String,
}

impl BadBody {
    pub fn new(reason: &'static str, text: impl Into<String>) -> BadBody {
        BadBody { reason, text: text.into() }
    }
}

type Checked<T> = Result<T, BadBody>;

/// One entry of the `choices` column.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceRow<'v> {
    pub index: Option<i64>,
    pub finish_reason: Option<&'v str>,
    pub content: Option<&'v str>,
}

/// The typed values of a good body (`BODY_FIELDS` of `gpu_stage/transform/contract/extract.py`).
#[derive(Debug, Clone, PartialEq)]
pub struct BodyRow<'v> {
    pub completion_id: &'v str,
    pub object: &'v str,
    pub created: i64,
    pub model: Option<&'v str>,
    pub finish_reason: Option<&'v str>,
    pub stop_reason: Option<Cow<'v, str>>,
    pub content_text: Option<&'v str>,
    pub reasoning: Option<&'v str>,
    pub tool_name: Option<&'v str>,
    pub tool_arguments: Option<String>,
    pub tool_arguments_valid: Option<bool>,
    pub choices: Vec<ChoiceRow<'v>>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub total_tokens: Option<i64>,
    pub cached_tokens: Option<i64>,
    pub system_fingerprint: Option<&'v str>,
    pub service_tier: Option<&'v str>,
    pub metadata: Option<Vec<(&'v str, Cow<'v, str>)>>,
    pub extra: Vec<(&'v str, String)>,
    pub content: Content,
}

const OBJECTS: [&str; 3] = ["chat.completion", "chat.completion.chunk", "text_completion"];
const NOT_EXTRA: [&str; 11] = [
    "id", "object", "created", "model", "choices", "usage", "system_fingerprint", "service_tier", "metadata",
    "prompt_logprobs", "prompt_token_ids",
];
const I32: (i64, i64) = (i32::MIN as i64, i32::MAX as i64);
const I64: (i64, i64) = (i64::MIN, i64::MAX);

/// JSON name of a value's type, as used in error texts.
pub fn json_type(v: &Value<'_>) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Int(_) | Value::UInt(_) | Value::Float(_) => "number",
        Value::Str(_) => "string",
        Value::Arr(_) => "array",
        Value::Obj(_) => "object",
    }
}

fn wrong(path: &str, expected: &str, v: &Value<'_>) -> BadBody {
    BadBody::new(WRONG_TYPE, format!("{path}: expected {expected}, got {}", json_type(v)))
}

fn string<'v>(obj: &'v Obj<'_>, key: &str, path: impl FnOnce() -> String) -> Checked<Option<&'v str>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s.as_ref())),
        Some(other) => Err(wrong(&path(), "string", other)),
    }
}

fn integer(obj: &Obj<'_>, key: &str, path: impl FnOnce() -> String, range: (i64, i64)) -> Checked<Option<i64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Int(i)) if range.0 <= *i && *i <= range.1 => Ok(Some(*i)),
        Some(other) => Err(wrong(&path(), "integer", other)),
    }
}

fn object<'o, 'v>(obj: &'o Obj<'v>, key: &str, path: impl FnOnce() -> String) -> Checked<Option<&'o Obj<'v>>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Obj(o)) => Ok(Some(o)),
        Some(other) => Err(wrong(&path(), "object", other)),
    }
}

fn required<'o, 'v>(obj: &'o Obj<'v>, key: &str) -> Checked<&'o Value<'v>> {
    obj.non_null(key).ok_or_else(|| BadBody::new(MISSING_FIELD, format!("{key}: missing")))
}

fn json_text(v: &Value<'_>, path: impl FnOnce() -> String) -> Checked<String> {
    dumps(v).map_err(|_| BadBody::new(INVALID_JSON, format!("{}: nesting deeper than {MAX_DUMP_DEPTH} levels", path())))
}

/// An object as a string map: strings as they are, other values as compact JSON text.
pub fn string_map<'v>(obj: &'v Obj<'_>, path: &str) -> Checked<Vec<(&'v str, Cow<'v, str>)>> {
    obj.entries
        .iter()
        .map(|(k, v)| {
            let text = match v {
                Value::Str(s) => Cow::Borrowed(s.as_ref()),
                other => Cow::Owned(json_text(other, || format!("{path}.{k}"))?),
            };
            Ok((k.as_ref(), text))
        })
        .collect()
}

/// `choices[i]`, or its `message`/`delta` object: a path for error texts, spelled out only when one
/// is raised (good rows never format it).
#[derive(Debug, Clone, Copy)]
struct ChoicePath {
    index: usize,
    holder: Option<&'static str>,
}

impl std::fmt::Display for ChoicePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "choices[{}]", self.index)?;
        match self.holder {
            Some(holder) => write!(f, ".{holder}"),
            None => Ok(()),
        }
    }
}

/// What one `choices[i]` entry gave: its row, its message/delta object, and that object's path.
struct ChoiceParts<'o, 'v> {
    row: ChoiceRow<'o>,
    message: Option<&'o Obj<'v>>,
    mpath: ChoicePath,
}

fn choice_parts<'o, 'v>(choice: &'o Value<'v>, i: usize) -> Checked<ChoiceParts<'o, 'v>> {
    let path = ChoicePath { index: i, holder: None };
    let Value::Obj(choice) = choice else { return Err(wrong(&path.to_string(), "object", choice)) };
    let index = integer(choice, "index", || format!("{path}.index"), I32)?;
    let finish_reason = string(choice, "finish_reason", || format!("{path}.finish_reason"))?;
    let holder = ["message", "delta"].into_iter().find(|key| choice.contains(key));
    let mpath = ChoicePath { index: i, holder };
    let message = match holder {
        Some(key) => object(choice, key, || mpath.to_string())?,
        None => None,
    };
    let content = match (message, holder) {
        (Some(m), _) => string(m, "content", || format!("{mpath}.content"))?,
        (None, None) => string(choice, "text", || format!("{path}.text"))?,
        (None, Some(_)) => None,
    };
    Ok(ChoiceParts { row: ChoiceRow { index, finish_reason, content }, message, mpath })
}

type Tool<'v> = (Option<&'v str>, Option<String>, Option<bool>);

fn first_tool<'v>(message: &'v Obj<'_>, mpath: ChoicePath) -> Checked<Tool<'v>> {
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => return Ok((None, None, None)),
        Some(Value::Arr(calls)) => calls,
        Some(other) => return Err(wrong(&format!("{mpath}.tool_calls"), "array", other)),
    };
    let Some(first) = calls.first() else { return Ok((None, None, None)) };
    let Value::Obj(first) = first else { return Err(wrong(&format!("{mpath}.tool_calls[0]"), "object", first)) };
    let Some(function) = object(first, "function", || format!("{mpath}.tool_calls[0].function"))? else {
        return Ok((None, None, None));
    };
    let name = string(function, "name", || format!("{mpath}.tool_calls[0].function.name"))?;
    let (arguments, valid) = tool_arguments(function.get("arguments"));
    Ok((name, arguments, valid))
}

fn stop_reason<'v>(choice: &'v Value<'_>) -> Checked<Option<Cow<'v, str>>> {
    let Value::Obj(choice) = choice else { return Ok(None) };
    match choice.get("stop_reason") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(s)) => Ok(Some(Cow::Borrowed(s.as_ref()))),
        Some(Value::Int(i)) => Ok(Some(Cow::Owned(i.to_string()))),
        Some(Value::UInt(u)) => Ok(Some(Cow::Owned(u.to_string()))),
        Some(other) => Err(wrong("choices[0].stop_reason", "integer or string", other)),
    }
}

type Usage = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);

fn usage(obj: &Obj<'_>) -> Checked<Usage> {
    let Some(usage) = object(obj, "usage", || "usage".into())? else { return Ok((None, None, None, None)) };
    let details = object(usage, "prompt_tokens_details", || "usage.prompt_tokens_details".into())?;
    let cached = match details {
        Some(d) => integer(d, "cached_tokens", || "usage.prompt_tokens_details.cached_tokens".into(), I64)?,
        None => None,
    };
    Ok((
        integer(usage, "prompt_tokens", || "usage.prompt_tokens".into(), I64)?,
        integer(usage, "completion_tokens", || "usage.completion_tokens".into(), I64)?,
        integer(usage, "total_tokens", || "usage.total_tokens".into(), I64)?,
        cached,
    ))
}

/// Flat `{"object": "error", ...}` or nested `{"error": ...}` (any non-null `error`).
fn is_error_body(obj: &Obj<'_>) -> bool {
    matches!(obj.get("object"), Some(Value::Str(s)) if s == "error") || obj.non_null("error").is_some()
}

fn envelope<'v>(obj: &'v Obj<'_>) -> Checked<(&'v str, &'v str, i64, &'v Vec<Value<'v>>)> {
    let Value::Str(id) = required(obj, "id")? else { return Err(wrong("id", "string", required(obj, "id")?)) };
    let kind = match required(obj, "object")? {
        Value::Str(k) => k,
        other => return Err(wrong("object", "string", other)),
    };
    if !OBJECTS.contains(&kind.as_ref()) {
        return Err(BadBody::new(WRONG_TYPE, "object: unsupported value"));
    }
    let created = created_ms(required(obj, "created")?).map_err(|text| BadBody::new(WRONG_TYPE, text))?;
    let choices = match required(obj, "choices")? {
        Value::Arr(c) => c,
        other => return Err(wrong("choices", "array", other)),
    };
    Ok((id.as_ref(), kind.as_ref(), created, choices))
}

/// The typed values of one decoded top-level object, or its dead letter.
pub fn extract<'v>(obj: &'v Obj<'v>, validator: &Validator) -> Checked<BodyRow<'v>> {
    if is_error_body(obj) {
        return Err(BadBody::new(UPSTREAM_ERROR, "upstream error body"));
    }
    let (completion_id, object_kind, created, choices) = envelope(obj)?;
    let model = string(obj, "model", || "model".into())?;
    let mut rows = Vec::with_capacity(choices.len());
    let mut first: Option<(Option<&'v Obj<'v>>, ChoicePath)> = None;
    for (i, choice) in choices.iter().enumerate() {
        let parts = choice_parts(choice, i)?;
        rows.push(parts.row);
        if i == 0 {
            first = Some((parts.message, parts.mpath));
        }
    }
    let (mut finish_reason, mut stop, mut reasoning) = (None, None, None);
    let (mut tool_name, mut tool_args, mut tool_valid) = (None, None, None);
    if let Some((message, mpath)) = first {
        finish_reason = rows[0].finish_reason;
        stop = stop_reason(&choices[0])?;
        if let Some(message) = message {
            reasoning = string(message, "reasoning", || format!("{mpath}.reasoning"))?;
            if reasoning.is_none() {
                reasoning = string(message, "reasoning_content", || format!("{mpath}.reasoning_content"))?;
            }
            (tool_name, tool_args, tool_valid) = first_tool(message, mpath)?;
        }
    }
    let (prompt_tokens, completion_tokens, total_tokens, cached_tokens) = usage(obj)?;
    let system_fingerprint = string(obj, "system_fingerprint", || "system_fingerprint".into())?;
    let service_tier = string(obj, "service_tier", || "service_tier".into())?;
    let metadata = match object(obj, "metadata", || "metadata".into())? {
        Some(m) => Some(string_map(m, "metadata")?),
        None => None,
    };
    let mut extra = Vec::new();
    for (k, v) in &obj.entries {
        if matches!(v, Value::Null) || NOT_EXTRA.contains(&k.as_ref()) {
            continue;
        }
        extra.push((k.as_ref(), json_text(v, || k.to_string())?));
    }
    let content_text = rows.first().and_then(|r| r.content);
    let content = match content_text {
        Some(text) => validator.parse_content(text),
        None => Content::Prose,
    };
    Ok(BodyRow {
        completion_id,
        object: object_kind,
        created,
        model,
        finish_reason,
        stop_reason: stop,
        content_text,
        reasoning,
        tool_name,
        tool_arguments: tool_args,
        tool_arguments_valid: tool_valid,
        choices: rows,
        prompt_tokens,
        completion_tokens,
        total_tokens,
        cached_tokens,
        system_fingerprint,
        service_tier,
        metadata,
        extra,
        content,
    })
}
