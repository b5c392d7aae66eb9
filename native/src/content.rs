//! JSON inside strings (`gpu_stage/transform/contract/semantics.md` §4): the first choice's content against the content
//! JSON Schema, and the first tool call's arguments.

use crate::dump::dumps;
use crate::json::{parse, Obj, Value};

/// A typed content property value (the Avro `content` record's field).
#[derive(Debug, Clone, PartialEq)]
pub enum Typed {
    Str(String),
    Double(f64),
    Long(i64),
    Bool(bool),
    Array(Vec<Typed>),
}

/// What the content text gave: prose (all null), invalid (an error code), or a typed row.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Prose,
    Invalid(String),
    Valid(Vec<Option<Typed>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    String,
    Number,
    Integer,
    Boolean,
}

impl Kind {
    fn from_name(name: &str) -> Option<Kind> {
        match name {
            "string" => Some(Kind::String),
            "number" => Some(Kind::Number),
            "integer" => Some(Kind::Integer),
            "boolean" => Some(Kind::Boolean),
            _ => None,
        }
    }

    /// The typed value of `v` for this JSON Schema type, or None when `v` is of another type.
    fn coerce(self, v: &Value<'_>) -> Option<Typed> {
        match (self, v) {
            (Kind::String, Value::Str(s)) => Some(Typed::Str(s.to_string())),
            (Kind::Number, Value::Int(i)) => Some(Typed::Double(*i as f64)),
            (Kind::Number, Value::UInt(u)) => Some(Typed::Double(*u as f64)),
            (Kind::Number, Value::Float(x)) => Some(Typed::Double(*x)),
            (Kind::Integer, Value::Int(i)) => Some(Typed::Long(*i)),
            (Kind::Integer, Value::Float(x)) if x.is_finite() && x.fract() == 0.0 => {
                (*x >= -9.223_372_036_854_775_808e18 && *x < 9.223_372_036_854_775_808e18).then(|| Typed::Long(*x as i64))
            }
            (Kind::Boolean, Value::Bool(b)) => Some(Typed::Bool(*b)),
            _ => None,
        }
    }
}

/// A JSON scalar as Python compares it: booleans equal 0 and 1, ints and floats compare exactly.
#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    Text(String),
    Num(Num),
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn of_value(v: &Value<'_>) -> Option<Num> {
        match v {
            Value::Bool(b) => Some(Num::Int(i128::from(*b))),
            Value::Int(i) => Some(Num::Int(i128::from(*i))),
            Value::UInt(u) => Some(Num::Int(i128::from(*u))),
            Value::Float(x) => Some(Num::Float(*x)),
            _ => None,
        }
    }

    fn of_typed(t: &Typed) -> Option<Num> {
        match t {
            Typed::Double(x) => Some(Num::Float(*x)),
            Typed::Long(i) => Some(Num::Int(i128::from(*i))),
            Typed::Bool(b) => Some(Num::Int(i128::from(*b))),
            _ => None,
        }
    }

    /// Exact comparison (Python semantics for int vs float; NaN never occurs here).
    fn cmp(self, other: Num) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a.cmp(&b),
            (Num::Float(a), Num::Float(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            (Num::Int(a), Num::Float(b)) => int_float_cmp(a, b),
            (Num::Float(a), Num::Int(b)) => int_float_cmp(b, a).reverse(),
        }
    }
}

/// Exact order of an integer and a finite double.
fn int_float_cmp(a: i128, b: f64) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    if b >= 1.7e38 {
        return Ordering::Less;
    }
    if b <= -1.7e38 {
        return Ordering::Greater;
    }
    let floor = b.floor();
    let fi = floor as i128;
    match a.cmp(&fi) {
        Ordering::Equal if b > floor => Ordering::Less,
        ord => ord,
    }
}

#[derive(Debug, Clone)]
struct Property {
    name: String,
    kind: Kind,
    array: bool,
    enumeration: Option<Vec<Scalar>>,
    minimum: Option<Num>,
    maximum: Option<Num>,
}

impl Property {
    fn check(&self, value: &Value<'_>) -> Result<Typed, String> {
        if self.array {
            let Value::Arr(items) = value else { return Err(format!("type:{}", self.name)) };
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(self.kind.coerce(item).ok_or_else(|| format!("items:{}", self.name))?);
            }
            return Ok(Typed::Array(out));
        }
        let typed = self.kind.coerce(value).ok_or_else(|| format!("type:{}", self.name))?;
        if let Some(allowed) = &self.enumeration {
            if !allowed.iter().any(|a| scalar_eq(a, &typed)) {
                return Err(format!("enum:{}", self.name));
            }
        }
        if let (Some(min), Some(n)) = (self.minimum, Num::of_typed(&typed)) {
            if n.cmp(min).is_lt() {
                return Err(format!("minimum:{}", self.name));
            }
        }
        if let (Some(max), Some(n)) = (self.maximum, Num::of_typed(&typed)) {
            if n.cmp(max).is_gt() {
                return Err(format!("maximum:{}", self.name));
            }
        }
        Ok(typed)
    }
}

fn scalar_eq(allowed: &Scalar, typed: &Typed) -> bool {
    match (allowed, typed) {
        (Scalar::Text(a), Typed::Str(b)) => a == b,
        (Scalar::Num(a), t) => Num::of_typed(t).is_some_and(|n| n.cmp(*a).is_eq()),
        _ => false,
    }
}

/// The content JSON Schema compiled to positional checks (see `gpu_stage/transform/contract/content.py`).
#[derive(Debug, Clone)]
pub struct Validator {
    props: Vec<Property>,
    required: Vec<String>,
    closed: bool,
}

impl Validator {
    /// Compile the supported subset of a content JSON Schema given as JSON text.
    pub fn compile(schema_json: &str) -> Result<Validator, String> {
        let schema = parse(schema_json).map_err(|_| "content schema is not JSON".to_string())?;
        let Value::Obj(schema) = schema else { return Err(NOT_OBJECT_SCHEMA.into()) };
        let (Some(Value::Str(kind)), Some(Value::Obj(props))) = (schema.get("type"), schema.get("properties")) else {
            return Err(NOT_OBJECT_SCHEMA.into());
        };
        if kind != "object" {
            return Err(NOT_OBJECT_SCHEMA.into());
        }
        let props = props.entries.iter().map(|(name, p)| compile_property(name, p)).collect::<Result<_, _>>()?;
        let required = match schema.get("required") {
            None => Vec::new(),
            Some(Value::Arr(names)) => names
                .iter()
                .map(|n| match n {
                    Value::Str(s) => Ok(s.to_string()),
                    _ => Err("content schema: required names must be strings".to_string()),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("content schema: required must be an array".into()),
        };
        let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
        Ok(Validator { props, required, closed })
    }

    /// Property names in schema order (the content record's fields).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.props.iter().map(|p| p.name.as_str())
    }

    /// Whether property `i` is an array.
    pub fn is_array(&self, i: usize) -> bool {
        self.props[i].array
    }

    /// JSON Schema scalar type of property `i` (the item type for arrays).
    pub fn kind(&self, i: usize) -> Kind {
        self.props[i].kind
    }

    fn validate(&self, value: &Value<'_>) -> Content {
        let Value::Obj(obj) = value else { return Content::Invalid("not_an_object".into()) };
        for name in &self.required {
            if !obj.contains(name) {
                return Content::Invalid(format!("missing:{name}"));
            }
        }
        if self.closed {
            for (key, _) in &obj.entries {
                if !self.props.iter().any(|p| p.name == *key) {
                    return Content::Invalid(format!("additional:{key}"));
                }
            }
        }
        let mut row = Vec::with_capacity(self.props.len());
        for prop in &self.props {
            match obj.get(&prop.name) {
                None => row.push(None),
                Some(v) => match prop.check(v) {
                    Ok(typed) => row.push(Some(typed)),
                    Err(code) => return Content::Invalid(code),
                },
            }
        }
        Content::Valid(row)
    }

    /// `(content_valid, content_error, content)` for a first choice's content text.
    pub fn parse_content(&self, text: &str) -> Content {
        let Some(candidate) = json_candidate(text) else { return Content::Prose };
        match parse(candidate) {
            Err(_) => Content::Invalid("invalid_json".into()),
            Ok(value) => self.validate(&value),
        }
    }
}

const NOT_OBJECT_SCHEMA: &str = "content schema must be an object with properties";

fn compile_property(name: &str, prop: &Value<'_>) -> Result<Property, String> {
    let Value::Obj(prop) = prop else { return Err(format!("content schema property {name:?}: not an object")) };
    let type_name = |o: &Obj<'_>| match o.get("type") {
        Some(Value::Str(s)) => Some(s.to_string()),
        _ => None,
    };
    let kind_name = type_name(prop);
    if kind_name.as_deref() == Some("array") {
        let item = match prop.get("items") {
            Some(Value::Obj(items)) => type_name(items),
            _ => None,
        };
        let kind = item.as_deref().and_then(Kind::from_name);
        let kind = kind.ok_or_else(|| format!("content schema property {name:?}: unsupported array item type"))?;
        return Ok(Property { name: name.into(), kind, array: true, enumeration: None, minimum: None, maximum: None });
    }
    let kind = kind_name.as_deref().and_then(Kind::from_name);
    let kind = kind.ok_or_else(|| format!("content schema property {name:?}: unsupported type"))?;
    let bound = |key: &str| -> Result<Option<Num>, String> {
        match prop.get(key) {
            None => Ok(None),
            Some(v) if matches!(kind, Kind::Number | Kind::Integer) => Num::of_value(v)
                .map(Some)
                .ok_or_else(|| format!("content schema property {name:?}: {key} must be a number")),
            Some(_) => Err(format!("content schema property {name:?}: {key} needs a numeric type")),
        }
    };
    let enumeration = match prop.get("enum") {
        Some(Value::Arr(items)) => Some(
            items
                .iter()
                .map(|v| match v {
                    Value::Str(s) => Scalar::Text(s.to_string()),
                    other => Num::of_value(other).map_or(Scalar::Other, Scalar::Num),
                })
                .collect(),
        ),
        _ => None,
    };
    Ok(Property { name: name.into(), kind, array: false, enumeration, minimum: bound("minimum")?, maximum: bound("maximum")? })
}

const FENCE: &str = "```";

fn is_json_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// `s` without leading JSON whitespace (ASCII bytes, so slicing stays on char boundaries).
fn trim_start_ws(s: &str) -> &str {
    let skip = s.bytes().take_while(|b| is_json_ws(*b)).count();
    &s[skip..]
}

/// `s` without trailing JSON whitespace.
fn trim_end_ws(s: &str) -> &str {
    let keep = s.len() - s.bytes().rev().take_while(|b| is_json_ws(*b)).count();
    &s[..keep]
}

/// The JSON text inside `text` if it looks like JSON (after fence stripping), else None (prose).
pub fn json_candidate(text: &str) -> Option<&str> {
    let mut body = trim_start_ws(text);
    if !body.starts_with(FENCE) {
        return matches!(body.as_bytes().first(), Some(b'{' | b'[')).then(|| trim_end_ws(body));
    }
    body = match body.find('\n') {
        None => "",
        Some(nl) => &body[nl + 1..],
    };
    body = trim_end_ws(body);
    if let Some(inner) = body.strip_suffix(FENCE) {
        body = inner;
    }
    body = trim_end_ws(trim_start_ws(body));
    matches!(body.as_bytes().first(), Some(b'{' | b'[')).then_some(body)
}

/// `(tool_arguments, tool_arguments_valid)` for the first tool call's `function.arguments`.
pub fn tool_arguments(arguments: Option<&Value<'_>>) -> (Option<String>, Option<bool>) {
    match arguments {
        None | Some(Value::Null) => (None, None),
        Some(Value::Str(text)) => match parse(text) {
            Ok(value @ Value::Obj(_)) => match dumps(&value) {
                Ok(compact) => (Some(compact), Some(true)),
                Err(_) => (Some(text.to_string()), Some(false)),
            },
            _ => (Some(text.to_string()), Some(false)),
        },
        Some(other) => (dumps(other).ok(), Some(matches!(other, Value::Obj(_)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"{"type":"object","properties":{
        "sentiment":{"type":"string","enum":["positive","neutral","negative"]},
        "score":{"type":"number","minimum":0,"maximum":1},
        "risk_level":{"type":"string","enum":["low","medium","high"]},
        "topics":{"type":"array","items":{"type":"string"}},
        "needs_review":{"type":"boolean"}},
        "required":["sentiment","score","risk_level"],"additionalProperties":false}"#;

    #[test]
    fn content_rules() {
        let v = Validator::compile(SCHEMA).unwrap();
        assert_eq!(v.parse_content("hello"), Content::Prose);
        assert_eq!(v.parse_content("```json\n{\"a\"\n```"), Content::Invalid("invalid_json".into()));
        assert_eq!(v.parse_content("[1]"), Content::Invalid("not_an_object".into()));
        assert_eq!(v.parse_content("{\"sentiment\":\"positive\"}"), Content::Invalid("missing:score".into()));
        let ok = "```json\n{\"sentiment\":\"neutral\",\"score\":1,\"risk_level\":\"low\",\"topics\":[\"a\"]}\n```";
        assert_eq!(
            v.parse_content(ok),
            Content::Valid(vec![
                Some(Typed::Str("neutral".into())),
                Some(Typed::Double(1.0)),
                Some(Typed::Str("low".into())),
                Some(Typed::Array(vec![Typed::Str("a".into())])),
                None,
            ])
        );
        let over = "{\"sentiment\":\"neutral\",\"score\":1.5,\"risk_level\":\"low\"}";
        assert_eq!(v.parse_content(over), Content::Invalid("maximum:score".into()));
        let extra = "{\"sentiment\":\"neutral\",\"score\":0,\"risk_level\":\"low\",\"x\":1}";
        assert_eq!(v.parse_content(extra), Content::Invalid("additional:x".into()));
    }

    #[test]
    fn tool_argument_rules() {
        let s = |t: &str| Value::Str(t.to_string().into());
        assert_eq!(tool_arguments(Some(&s("{ \"a\" : 1 }"))), (Some("{\"a\":1}".into()), Some(true)));
        assert_eq!(tool_arguments(Some(&s("[1]"))), (Some("[1]".into()), Some(false)));
        assert_eq!(tool_arguments(Some(&Value::Int(3))), (Some("3".into()), Some(false)));
        assert_eq!(tool_arguments(None), (None, None));
    }
}
