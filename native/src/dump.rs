//! Compact JSON text with the spelling of `gpu_stage/transform/contract/semantics.md` §2 ("compact JSON text"): no
//! whitespace, keys in body order, non-ASCII raw, control characters as `\u00XX` except the five
//! short escapes, shortest round-trip doubles written positionally for decimal exponents -5..15 and
//! as `1.5e-7` / `1e+16` outside it. Containers nested deeper than 254 levels are refused.

use std::fmt::Write;

use crate::json::Value;

/// Deepest container nesting a value written as JSON text may have.
pub const MAX_DUMP_DEPTH: usize = 254;

/// The value nests containers deeper than [`MAX_DUMP_DEPTH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep;

/// Compact JSON text of `value`.
pub fn dumps(value: &Value<'_>) -> Result<String, TooDeep> {
    let mut out = String::new();
    write_value(value, &mut out, 0)?;
    Ok(out)
}

fn write_value(value: &Value<'_>, out: &mut String, depth: usize) -> Result<(), TooDeep> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Int(v) => write!(out, "{v}").expect("write to String"),
        Value::UInt(v) => write!(out, "{v}").expect("write to String"),
        Value::Float(x) => write_float(*x, out),
        Value::Str(s) => write_string(s, out),
        Value::Arr(items) => {
            if depth >= MAX_DUMP_DEPTH {
                return Err(TooDeep);
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out, depth + 1)?;
            }
            out.push(']');
        }
        Value::Obj(obj) => {
            if depth >= MAX_DUMP_DEPTH {
                return Err(TooDeep);
            }
            out.push('{');
            for (i, (key, item)) in obj.entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(item, out, depth + 1)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// A JSON string literal: `"` and `\` escaped, control characters escaped, everything else raw.
pub fn write_string(s: &str, out: &mut String) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[run..i]);
        if short.is_empty() {
            write!(out, "\\u{:04x}", b).expect("write to String");
        } else {
            out.push_str(short);
        }
        run = i + 1;
    }
    out.push_str(&s[run..]);
    out.push('"');
}

/// A finite double in the shortest text that reads back to it (`-0.0` keeps its sign).
///
/// The digits come from Ryu, as orjson's do: where two shortest candidates are equally near (the
/// double 562949953421312.25 reads back from both `…312.2` and `…312.3`), Ryu and orjson pick the
/// even digit and Rust's own `{:e}` does not.
pub fn write_float(x: f64, out: &mut String) {
    if !x.is_finite() {
        out.push_str("null");
        return;
    }
    if x.is_sign_negative() {
        out.push('-');
    }
    if x == 0.0 {
        out.push_str("0.0");
        return;
    }
    let mut buffer = ryu::Buffer::new();
    let (digits, exp) = decimal(buffer.format_finite(x.abs()));
    if (-5..16).contains(&exp) {
        positional(&digits, exp, out);
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp > 0 { '+' } else { '-' });
        write!(out, "{}", exp.unsigned_abs()).expect("write to String");
    }
}

/// Significant digits and decimal exponent (of the first digit) of a positive number's Ryu text
/// (`123.0`, `0.00001`, `1.5e-7`, `1e16`).
fn decimal(text: &str) -> (String, i32) {
    let (mantissa, exp) = match text.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().expect("Ryu exponent is an integer")),
        None => (text, 0),
    };
    let point = mantissa.find('.').unwrap_or(mantissa.len()) as i32;
    let all: String = mantissa.chars().filter(|c| *c != '.').collect();
    let leading = all.len() - all.trim_start_matches('0').len();
    let digits = all[leading..].trim_end_matches('0');
    (digits.to_string(), point - 1 - leading as i32 + exp)
}

/// `digits` × 10^(exp - len + 1) written without an exponent, always with a fraction part.
fn positional(digits: &str, exp: i32, out: &mut String) {
    if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(digits);
        return;
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        out.push_str(digits);
        for _ in digits.len()..int_len {
            out.push('0');
        }
        out.push_str(".0");
    } else {
        out.push_str(&digits[..int_len]);
        out.push('.');
        out.push_str(&digits[int_len..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse;

    fn float(x: f64) -> String {
        let mut s = String::new();
        write_float(x, &mut s);
        s
    }

    #[test]
    fn float_spelling() {
        let cases = [
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123.0, "123.0"),
            (1.5e-7, "1.5e-7"),
            (0.0001, "0.0001"),
            (1e-5, "0.00001"),
            (2.5e-5, "0.000025"),
            (1e-6, "1e-6"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (1e22, "1e+22"),
            (5e-324, "5e-324"),
            (1.2345678901234568e16, "1.2345678901234568e+16"),
            (9007199254740992.0, "9007199254740992.0"),
            (123456.789, "123456.789"),
            (0.1, "0.1"),
            (562949953421312.2, "562949953421312.2"),
            (1234567890123456.7, "1234567890123456.8"),
            (0.30000000000000004, "0.30000000000000004"),
        ];
        for (x, want) in cases {
            assert_eq!(float(x), want, "{x:e}");
        }
    }

    #[test]
    fn strings_and_depth() {
        let v = parse("{\"a\":\"\u{2028}/\u{7f}\\u001f\\b\\\"\\\\\"}").unwrap();
        assert_eq!(dumps(&v).unwrap(), "{\"a\":\"\u{2028}/\u{7f}\\u001f\\b\\\"\\\\\"}");
        let deep = |d: usize| "[".repeat(d) + &"]".repeat(d);
        assert!(dumps(&parse(&deep(254)).unwrap()).is_ok());
        assert!(dumps(&parse(&deep(255)).unwrap()).is_err());
    }
}
