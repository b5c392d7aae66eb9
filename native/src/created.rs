//! `created` → epoch milliseconds (`gpu_stage/transform/contract/semantics.md` §3), with the reference's error texts.

use crate::json::Value;

/// Epoch milliseconds of a non-null `created` value, or the dead letter's error text.
pub fn created_ms(value: &Value<'_>) -> Result<i64, String> {
    let ms: i128 = match value {
        Value::Bool(_) => return Err("created: boolean is not a timestamp".into()),
        Value::Int(s) => i128::from(*s) * 1000,
        Value::UInt(s) => i128::from(*s) * 1000,
        Value::Float(x) => {
            let scaled = x * 1000.0;
            if !scaled.is_finite() {
                return Err("created: not finite".into());
            }
            let rounded = scaled.round_ties_even();
            if rounded >= 9.223_372_036_854_775_807e18 {
                return Err(OUTSIDE.into());
            }
            rounded as i128
        }
        Value::Str(text) => iso_ms(text)?,
        Value::Arr(_) => return Err("created: list is not a timestamp".into()),
        Value::Obj(_) => return Err("created: dict is not a timestamp".into()),
        Value::Null => return Err("created: NoneType is not a timestamp".into()),
    };
    if ms < 0 || ms > i128::from(i64::MAX) {
        return Err(OUTSIDE.into());
    }
    Ok(ms as i64)
}

const OUTSIDE: &str = "created: outside 1970-01-01 .. int64 milliseconds";
const NOT_ISO: &str = "created: string is not ISO-8601 with an offset";

/// `YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|±HH:MM)`: fraction truncated to ms, offset applied.
fn iso_ms(text: &str) -> Result<i128, String> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter().try_fold(0i64, |acc, &d| d.is_ascii_digit().then(|| acc * 10 + i64::from(d - b'0')))
    };
    let sep = |at: usize, c: u8| b.get(at) == Some(&c);
    let fields = (|| {
        if !(sep(4, b'-') && sep(7, b'-') && sep(10, b'T') && sep(13, b':') && sep(16, b':')) {
            return None;
        }
        Some([num(0, 4)?, num(5, 2)?, num(8, 2)?, num(11, 2)?, num(14, 2)?, num(17, 2)?])
    })();
    let [year, month, day, hour, minute, second] = fields.ok_or_else(|| NOT_ISO.to_string())?;
    let mut pos = 19;
    let mut millis = 0i64;
    if sep(pos, b'.') {
        let start = pos + 1;
        let mut end = start;
        while b.get(end).is_some_and(u8::is_ascii_digit) {
            end += 1;
        }
        let count = end - start;
        if count == 0 || count > 9 {
            return Err(NOT_ISO.into());
        }
        for i in 0..3 {
            millis = millis * 10 + b.get(start + i).filter(|_| i < count).map_or(0, |d| i64::from(d - b'0'));
        }
        pos = end;
    }
    let offset_minutes = match b.get(pos) {
        Some(b'Z') if b.len() == pos + 1 => 0,
        Some(&sign @ (b'+' | b'-')) if b.len() == pos + 6 && sep(pos + 3, b':') => {
            let h = num(pos + 1, 2).ok_or_else(|| NOT_ISO.to_string())?;
            let m = num(pos + 4, 2).ok_or_else(|| NOT_ISO.to_string())?;
            let total = h * 60 + m;
            if sign == b'-' {
                -total
            } else {
                total
            }
        }
        _ => return Err(NOT_ISO.into()),
    };
    if offset_minutes.abs() >= 24 * 60 {
        return Err(format!(
            "created: offset must be a timedelta strictly between -timedelta(hours=24) and \
             timedelta(hours=24), not {}.",
            timedelta_repr(offset_minutes * 60)
        ));
    }
    check_date_time(year, month, day, hour, minute, second).map_err(|e| format!("created: {e}"))?;
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    Ok(i128::from(seconds) * 1000 + i128::from(millis))
}

/// Python's `datetime(...)` argument checks, in its order and with its texts.
fn check_date_time(year: i64, month: i64, day: i64, hour: i64, minute: i64, second: i64) -> Result<(), String> {
    if !(1..=9999).contains(&year) {
        return Err(format!("year {year} is out of range"));
    }
    if !(1..=12).contains(&month) {
        return Err("month must be in 1..12".into());
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err("day is out of range for month".into());
    }
    if !(0..=23).contains(&hour) {
        return Err("hour must be in 0..23".into());
    }
    if !(0..=59).contains(&minute) {
        return Err("minute must be in 0..59".into());
    }
    if !(0..=59).contains(&second) {
        return Err("second must be in 0..59".into());
    }
    Ok(())
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Python's `repr(timedelta(seconds=s))`: normalized to days and non-negative seconds.
fn timedelta_repr(total_seconds: i64) -> String {
    let days = total_seconds.div_euclid(86_400);
    let seconds = total_seconds.rem_euclid(86_400);
    match (days, seconds) {
        (0, 0) => "datetime.timedelta(0)".into(),
        (d, 0) => format!("datetime.timedelta(days={d})"),
        (0, s) => format!("datetime.timedelta(seconds={s})"),
        (d, s) => format!("datetime.timedelta(days={d}, seconds={s})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn s(text: &str) -> Result<i64, String> {
        created_ms(&Value::Str(Cow::Borrowed(text)))
    }

    #[test]
    fn forms() {
        assert_eq!(created_ms(&Value::Int(1_741_831_566)), Ok(1_741_831_566_000));
        assert_eq!(created_ms(&Value::Float(1_741_831_566.5)), Ok(1_741_831_566_500));
        assert_eq!(created_ms(&Value::Float(0.0005)), Ok(0));
        assert_eq!(created_ms(&Value::Float(-0.0004)), Ok(0));
        assert_eq!(s("2025-03-13T02:06:06Z"), Ok(1_741_831_566_000));
        assert_eq!(s("2025-03-13T04:06:06.123456789+02:00"), Ok(1_741_831_566_123));
        assert_eq!(s("1970-01-01T00:00:00.5Z"), Ok(500));
        assert!(s("1970-01-01T00:00:00+00:01").is_err());
        assert_eq!(s("2021-02-29T00:00:00Z"), Err("created: day is out of range for month".into()));
        assert_eq!(s("2021-02-28t00:00:00Z"), Err(NOT_ISO.into()));
        assert_eq!(
            s("2021-02-28T00:00:00+99:99"),
            Err("created: offset must be a timedelta strictly between -timedelta(hours=24) and \
                 timedelta(hours=24), not datetime.timedelta(days=4, seconds=16740).".into())
        );
        assert_eq!(
            s("2021-02-28T00:00:00-25:01"),
            Err("created: offset must be a timedelta strictly between -timedelta(hours=24) and \
                 timedelta(hours=24), not datetime.timedelta(days=-2, seconds=82740).".into())
        );
    }
}
