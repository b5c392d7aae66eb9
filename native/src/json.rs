//! A strict RFC 8259 JSON reader into a borrowed value tree, with the decoding rules of
//! `gpu_stage/transform/contract/semantics.md` §1: no NaN/Infinity, no trailing data, lone surrogate escapes and
//! nesting past 1024 levels rejected, duplicate keys resolved as "last value, first position",
//! integers beyond 64 bits read as doubles, numbers that overflow a double rejected.
//!
//! Strings without escapes borrow from the input, so a typical body allocates only its containers.

use std::borrow::Cow;
use std::collections::HashMap;

/// Deepest container nesting the reader accepts.
pub const MAX_DEPTH: usize = 1024;

/// Objects with more entries than this index their keys to keep duplicate detection linear.
const INDEX_AFTER: usize = 16;

/// A decoded JSON value; strings borrow from the input where they hold no escapes.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    /// An integer that fits `i64`.
    Int(i64),
    /// A positive integer above `i64::MAX` that fits `u64`.
    UInt(u64),
    Float(f64),
    Str(Cow<'a, str>),
    Arr(Vec<Value<'a>>),
    Obj(Obj<'a>),
}

/// A JSON object: entries in order of their key's first occurrence, each with its last value.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Obj<'a> {
    pub entries: Vec<(Cow<'a, str>, Value<'a>)>,
}

impl<'a> Obj<'a> {
    /// The value stored under `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Whether `key` is present (with any value, null included).
    pub fn contains(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    /// The value under `key` unless it is absent or null (Python's `obj.get(key) is not None`).
    pub fn non_null(&self, key: &str) -> Option<&Value<'a>> {
        match self.get(key) {
            None | Some(Value::Null) => None,
            found => found,
        }
    }
}

/// The input is not one strict JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseError;

type Parsed<T> = Result<T, ParseError>;

/// Parse exactly one JSON value surrounded by optional JSON whitespace.
pub fn parse(text: &str) -> Parsed<Value<'_>> {
    let mut reader = Reader { text, bytes: text.as_bytes(), pos: 0, depth: 0 };
    reader.skip_ws();
    let value = reader.value()?;
    reader.skip_ws();
    if reader.pos != reader.bytes.len() {
        return Err(ParseError);
    }
    Ok(value)
}

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
}

impl<'a> Reader<'a> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Parsed<u8> {
        self.bytes.get(self.pos).copied().ok_or(ParseError)
    }

    fn value(&mut self) -> Parsed<Value<'a>> {
        match self.peek()? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => Ok(Value::Str(self.string()?)),
            b't' => self.literal(b"true", Value::Bool(true)),
            b'f' => self.literal(b"false", Value::Bool(false)),
            b'n' => self.literal(b"null", Value::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(ParseError),
        }
    }

    fn literal(&mut self, word: &[u8], value: Value<'a>) -> Parsed<Value<'a>> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(ParseError)
        }
    }

    fn enter(&mut self) -> Parsed<()> {
        self.depth += 1;
        self.pos += 1;
        if self.depth > MAX_DEPTH {
            return Err(ParseError);
        }
        Ok(())
    }

    /// Step over a container's closing bracket.
    fn leave(&mut self) {
        self.pos += 1;
        self.depth -= 1;
    }

    fn array(&mut self) -> Parsed<Value<'a>> {
        self.enter()?;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek()? == b']' {
            self.leave();
            return Ok(Value::Arr(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value()?);
            self.skip_ws();
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.leave();
                    return Ok(Value::Arr(items));
                }
                _ => return Err(ParseError),
            }
        }
    }

    fn object(&mut self) -> Parsed<Value<'a>> {
        self.enter()?;
        let mut obj = ObjBuilder::default();
        self.skip_ws();
        if self.peek()? == b'}' {
            self.leave();
            return Ok(Value::Obj(obj.finish()));
        }
        loop {
            self.skip_ws();
            if self.peek()? != b'"' {
                return Err(ParseError);
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek()? != b':' {
                return Err(ParseError);
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value()?;
            obj.insert(key, value);
            self.skip_ws();
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.leave();
                    return Ok(Value::Obj(obj.finish()));
                }
                _ => return Err(ParseError),
            }
        }
    }

    fn string(&mut self) -> Parsed<Cow<'a, str>> {
        self.pos += 1;
        let start = self.pos;
        self.skip_plain();
        loop {
            let b = *self.bytes.get(self.pos).ok_or(ParseError)?;
            match b {
                b'"' => {
                    let s = &self.text[start..self.pos];
                    self.pos += 1;
                    return Ok(Cow::Borrowed(s));
                }
                b'\\' => break,
                0..=0x1f => return Err(ParseError),
                _ => self.pos += 1,
            }
        }
        let mut out = String::with_capacity(self.pos - start + 16);
        out.push_str(&self.text[start..self.pos]);
        loop {
            let b = *self.bytes.get(self.pos).ok_or(ParseError)?;
            match b {
                b'"' => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                b'\\' => self.escape(&mut out)?,
                0..=0x1f => return Err(ParseError),
                _ => {
                    let run = self.pos;
                    while let Some(&c) = self.bytes.get(self.pos) {
                        if c == b'"' || c == b'\\' || c < 0x20 {
                            break;
                        }
                        self.pos += 1;
                    }
                    out.push_str(&self.text[run..self.pos]);
                }
            }
        }
    }

    /// Skip whole 8-byte words that hold no `"`, no `\\` and no control character.
    fn skip_plain(&mut self) {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
        while let Some(chunk) = self.bytes.get(self.pos..self.pos + 8) {
            let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            let special = has_zero(w ^ (ONES * u64::from(b'"')))
                | has_zero(w ^ (ONES * u64::from(b'\\')))
                | (w.wrapping_sub(ONES * 0x20) & !w & HIGH);
            if special != 0 {
                return;
            }
            self.pos += 8;
        }
    }

    fn escape(&mut self, out: &mut String) -> Parsed<()> {
        let kind = *self.bytes.get(self.pos + 1).ok_or(ParseError)?;
        self.pos += 2;
        let c = match kind {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => self.unicode_escape()?,
            _ => return Err(ParseError),
        };
        out.push(c);
        Ok(())
    }

    fn hex4(&mut self) -> Parsed<u32> {
        let digits = self.bytes.get(self.pos..self.pos + 4).ok_or(ParseError)?;
        let mut code = 0u32;
        for &d in digits {
            let v = (d as char).to_digit(16).ok_or(ParseError)?;
            code = code * 16 + v;
        }
        self.pos += 4;
        Ok(code)
    }

    /// The code point of a `\uXXXX` escape (after `\u`), pairing surrogates; lone ones are errors.
    fn unicode_escape(&mut self) -> Parsed<char> {
        let high = self.hex4()?;
        if (0xDC00..0xE000).contains(&high) {
            return Err(ParseError);
        }
        if !(0xD800..0xDC00).contains(&high) {
            return char::from_u32(high).ok_or(ParseError);
        }
        if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
            return Err(ParseError);
        }
        self.pos += 2;
        let low = self.hex4()?;
        if !(0xDC00..0xE000).contains(&low) {
            return Err(ParseError);
        }
        char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)).ok_or(ParseError)
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Parsed<Value<'a>> {
        let start = self.pos;
        let negative = self.bytes[self.pos] == b'-';
        if negative {
            self.pos += 1;
        }
        let int_start = self.pos;
        let int_digits = self.digits();
        if int_digits == 0 || (int_digits > 1 && self.bytes[int_start] == b'0') {
            return Err(ParseError);
        }
        let mut integer = true;
        if self.bytes.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(ParseError);
            }
            integer = false;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.pos) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(ParseError);
            }
            integer = false;
        }
        let text = &self.text[start..self.pos];
        if integer {
            if let Some(v) = integer_value(&self.bytes[int_start..self.pos], negative) {
                return Ok(v);
            }
        }
        let x: f64 = text.parse().map_err(|_| ParseError)?;
        if x.is_finite() {
            Ok(Value::Float(x))
        } else {
            Err(ParseError)
        }
    }
}

/// An integer literal as `Int`/`UInt` when it fits 64 bits (signed, or unsigned when positive).
fn integer_value(digits: &[u8], negative: bool) -> Option<Value<'static>> {
    let mut magnitude: u64 = 0;
    for &d in digits {
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        if magnitude <= 1u64 << 63 {
            return Some(Value::Int((magnitude as i64).wrapping_neg()));
        }
        return None;
    }
    if magnitude <= i64::MAX as u64 {
        Some(Value::Int(magnitude as i64))
    } else {
        Some(Value::UInt(magnitude))
    }
}

/// Collects object entries; a repeated key replaces the value in the key's first position.
#[derive(Default)]
struct ObjBuilder<'a> {
    entries: Vec<(Cow<'a, str>, Value<'a>)>,
    index: Option<HashMap<Cow<'a, str>, usize>>,
}

impl<'a> ObjBuilder<'a> {
    fn insert(&mut self, key: Cow<'a, str>, value: Value<'a>) {
        let found = match &self.index {
            Some(index) => index.get(&key).copied(),
            None => self.entries.iter().position(|(k, _)| *k == key),
        };
        if let Some(at) = found {
            self.entries[at].1 = value;
            return;
        }
        if let Some(index) = &mut self.index {
            index.insert(key.clone(), self.entries.len());
        } else if self.entries.len() >= INDEX_AFTER {
            let mut index: HashMap<Cow<'a, str>, usize> =
                self.entries.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect();
            index.insert(key.clone(), self.entries.len());
            self.index = Some(index);
        }
        self.entries.push((key, value));
    }

    fn finish(self) -> Obj<'a> {
        Obj { entries: self.entries }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Value<'_> {
        parse(s).expect(s)
    }

    #[test]
    fn scalars_and_numbers() {
        assert_eq!(ok("18446744073709551615"), Value::UInt(u64::MAX));
        assert_eq!(ok("18446744073709551616"), Value::Float(18446744073709551616.0));
        assert_eq!(ok("-9223372036854775808"), Value::Int(i64::MIN));
        assert_eq!(ok("-9223372036854775809"), Value::Float(-9223372036854775809.0));
        assert_eq!(ok("-0"), Value::Int(0));
        assert_eq!(ok("1E2"), Value::Float(100.0));
        assert_eq!(ok(" \t\n\rnull\r\n"), Value::Null);
        for bad in ["", " ", "01", "1.", ".5", "-", "1e", "1e+", "1e400", "NaN", "Infinity", "[1,]", "{\"a\":1,}", "{}x", "tru", "\u{feff}{}"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn strings_and_surrogates() {
        assert_eq!(ok(r#""\ud83d\ude00""#), Value::Str(Cow::Borrowed("😀")));
        assert_eq!(ok(r#""\/\b\f\n\r\t""#), Value::Str(Cow::Borrowed("/\u{8}\u{c}\n\r\t")));
        for bad in [r#""\ud800""#, r#""\udc00""#, r#""\ud800\u0041""#, r#""\x""#, "\"\u{1}\""] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn duplicate_keys_last_value_first_position() {
        let Value::Obj(obj) = ok(r#"{"a":1,"b":2,"a":3}"#) else { panic!() };
        assert_eq!(obj.entries.len(), 2);
        assert_eq!(obj.entries[0], (Cow::Borrowed("a"), Value::Int(3)));
        let many: String = (0..40).map(|i| format!("\"k{}\":{},", i % 20, i)).collect();
        let text = format!("{{{}\"z\":0}}", many);
        let Value::Obj(obj) = ok(&text) else { panic!() };
        assert_eq!(obj.entries.len(), 21);
        assert_eq!(obj.get("k3"), Some(&Value::Int(23)));
    }

    #[test]
    fn depth_limit() {
        let deep = |d: usize| "[".repeat(d) + &"]".repeat(d);
        assert!(parse(&deep(1024)).is_ok());
        assert!(parse(&deep(1025)).is_err());
    }
}
