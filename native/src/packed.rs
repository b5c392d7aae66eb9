//! A batch held as contiguous buffers, the way a Kafka fetch delivers it: every value back to back
//! with their ends, the keys likewise (with a null flag each), and each record's headers encoded back
//! to back. No per-record object exists, so the transform reads a record as three slices.
//!
//! Header encoding (per header, in arrival order): name length `u32` LE, the name's UTF-8 bytes,
//! value length `i32` LE (-1: a null value), the value's bytes. A record's headers are the bytes
//! between its two `header_ends`.

use crate::RawRecord;

const LATENCY_MS: &[u8] = b"latency.ms";
const ATTRIBUTES: &[u8] = b"attributes";

/// A record's `latency.ms` and `attributes` header values.
pub type HeaderValues<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);
/// A record's key, `latency.ms` and `attributes` values.
pub type RecordValues<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, Option<&'a [u8]>);
/// One header's name and value, and the bytes after it.
type OneHeader<'a> = (&'a [u8], Option<&'a [u8]>, &'a [u8]);

/// The columns of a packed batch (every `*_ends[i]` is where record `i`'s bytes end).
pub struct Packed<'a> {
    pub values: &'a [u8],
    pub value_ends: &'a [i64],
    pub keys: &'a [u8],
    pub key_ends: &'a [i64],
    /// Non-zero where the record has no key.
    pub key_null: &'a [u8],
    pub headers: &'a [u8],
    pub header_ends: &'a [i64],
    pub partitions: &'a [i64],
    pub offsets: &'a [i64],
    pub timestamps: &'a [i64],
}

/// Where item `i` of a packed column lies: from the previous item's end (0 for the first) to its own.
pub(crate) fn span(ends: &[i64], i: usize) -> (usize, usize) {
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    (start, ends[i] as usize)
}

/// `ends` is non-decreasing, starts at or above 0 and stays inside `len` bytes.
pub(crate) fn check_ends(ends: &[i64], len: usize, what: &str) -> Result<(), String> {
    let mut at = 0i64;
    for &end in ends {
        if end < at {
            return Err(format!("{what}: ends must not decrease"));
        }
        at = end;
    }
    if at as usize > len {
        return Err(format!("{what}: ends run past the buffer ({at} > {len})"));
    }
    Ok(())
}

impl<'a> Packed<'a> {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.value_ends.len()
    }

    /// Whether the batch has no records.
    pub fn is_empty(&self) -> bool {
        self.value_ends.is_empty()
    }

    /// Refuse columns of different lengths and ends outside their buffers, so later slicing cannot
    /// fail (headers are checked by [`Packed::check_headers`] for the records a call reads).
    pub fn check(&self) -> Result<(), String> {
        let n = self.len();
        let lengths = [
            self.key_ends.len(),
            self.key_null.len(),
            self.header_ends.len(),
            self.partitions.len(),
            self.offsets.len(),
            self.timestamps.len(),
        ];
        if lengths.iter().any(|&l| l != n) {
            return Err(format!("packed batch columns differ in length from the values ({n}): {lengths:?}"));
        }
        check_ends(self.value_ends, self.values.len(), "value_ends")?;
        check_ends(self.key_ends, self.keys.len(), "key_ends")?;
        check_ends(self.header_ends, self.headers.len(), "header_ends")
    }

    /// Refuse malformed headers among the records at `positions` (all of them: None).
    pub fn check_headers(&self, positions: Option<&[i64]>) -> Result<(), String> {
        match positions {
            Some(picks) => picks.iter().try_for_each(|&p| self.header_values(p as usize).map(drop)),
            None => (0..self.len()).try_for_each(|i| self.header_values(i).map(drop)),
        }
    }

    /// Record `i`'s value.
    pub fn value(&self, i: usize) -> &'a [u8] {
        let (s, e) = span(self.value_ends, i);
        &self.values[s..e]
    }

    /// Record `i`'s key, None when it has none.
    pub fn key(&self, i: usize) -> Option<&'a [u8]> {
        if self.key_null[i] != 0 {
            return None;
        }
        let (s, e) = span(self.key_ends, i);
        Some(&self.keys[s..e])
    }

    /// Record `i`'s headers, still in the packed encoding.
    pub fn header_bytes(&self, i: usize) -> &'a [u8] {
        let (s, e) = span(self.header_ends, i);
        &self.headers[s..e]
    }

    /// The last `latency.ms` and `attributes` values among record `i`'s headers (a null value is None).
    pub fn header_values(&self, i: usize) -> Result<HeaderValues<'a>, String> {
        let mut rest = self.header_bytes(i);
        let mut found = (None, None);
        while !rest.is_empty() {
            let (name, value, tail) = one_header(rest).ok_or_else(|| format!("record {i}: malformed packed headers"))?;
            if name == LATENCY_MS {
                found.0 = value;
            } else if name == ATTRIBUTES {
                found.1 = value;
            }
            rest = tail;
        }
        Ok(found)
    }

    /// Record `i` as the transform reads it (its headers already checked by [`Packed::check_headers`]).
    pub fn record(&self, i: usize) -> RawRecord<'a> {
        let (latency, attributes) = self.header_values(i).unwrap_or((None, None));
        RawRecord {
            value: self.value(i),
            key: self.key(i),
            latency,
            attributes,
            partition: self.partitions[i],
            offset: self.offsets[i],
            timestamp_ms: self.timestamps[i],
        }
    }
}

/// Every `(name, value)` of one record's encoded headers, in order.
pub fn headers(mut raw: &[u8]) -> Result<Vec<(&[u8], Option<&[u8]>)>, String> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let (name, value, tail) = one_header(raw).ok_or("malformed packed headers")?;
        out.push((name, value));
        raw = tail;
    }
    Ok(out)
}

/// Append one header in the packed encoding.
pub fn put_header(out: &mut Vec<u8>, name: &[u8], value: Option<&[u8]>) {
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name);
    match value {
        None => out.extend_from_slice(&(-1i32).to_le_bytes()),
        Some(v) => {
            out.extend_from_slice(&(v.len() as i32).to_le_bytes());
            out.extend_from_slice(v);
        }
    }
}

/// A batch's keys and the headers the transform reads, packed: what a device lane reads besides the
/// values.
#[derive(Default, Debug, PartialEq)]
pub struct RecordColumns {
    pub keys: Vec<u8>,
    pub key_ends: Vec<i64>,
    pub key_null: Vec<u8>,
    pub headers: Vec<u8>,
    pub header_ends: Vec<i64>,
}

impl RecordColumns {
    /// Pack `(key, latency.ms, attributes)` per record; a header is written only where it has a value
    /// (an absent header and a null one read the same).
    pub fn of<'r>(records: impl ExactSizeIterator<Item = RecordValues<'r>>) -> Self {
        let n = records.len();
        let mut out = RecordColumns {
            key_ends: Vec::with_capacity(n),
            key_null: Vec::with_capacity(n),
            header_ends: Vec::with_capacity(n),
            ..RecordColumns::default()
        };
        for (key, latency, attributes) in records {
            out.keys.extend_from_slice(key.unwrap_or_default());
            out.key_ends.push(out.keys.len() as i64);
            out.key_null.push(u8::from(key.is_none()));
            if latency.is_some() {
                put_header(&mut out.headers, LATENCY_MS, latency);
            }
            if attributes.is_some() {
                put_header(&mut out.headers, ATTRIBUTES, attributes);
            }
            out.header_ends.push(out.headers.len() as i64);
        }
        out
    }
}

/// One header off the front of `bytes`: `(name, value, the rest)`, None when it is cut short.
fn one_header(bytes: &[u8]) -> Option<OneHeader<'_>> {
    let name_len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let rest = &bytes[4..];
    let name = rest.get(..name_len)?;
    let rest = &rest[name_len..];
    let value_len = i32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
    let rest = &rest[4..];
    if value_len < 0 {
        return (value_len == -1).then_some((name, None, rest));
    }
    let value_len = value_len as usize;
    Some((name, Some(rest.get(..value_len)?), &rest[value_len..]))
}

/// Copy `src` into `dst` (same length), split over two threads when it is large.
pub fn copy_into(src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len(), "copy_into needs buffers of one size");
    const TWO_THREADS_FROM: usize = 4 << 20;
    if src.len() < TWO_THREADS_FROM {
        dst.copy_from_slice(src);
        return;
    }
    let half = src.len() / 2;
    let (src_a, src_b) = src.split_at(half);
    let (dst_a, dst_b) = dst.split_at_mut(half);
    std::thread::scope(|scope| {
        scope.spawn(|| dst_b.copy_from_slice(src_b));
        dst_a.copy_from_slice(src_a);
    });
}

/// Copy row `i` of `src` (it ends at `src_ends[i]`, starts where row `i - 1` ends) to `dst[starts[i]..]`.
pub fn place(dst: &mut [u8], src: &[u8], src_ends: &[i64], starts: &[i64]) -> Result<(), String> {
    if src_ends.len() != starts.len() {
        return Err("place: src_ends and starts differ in length".into());
    }
    check_ends(src_ends, src.len(), "src_ends")?;
    for (i, &start) in starts.iter().enumerate() {
        let (s, e) = span(src_ends, i);
        let at = usize::try_from(start).map_err(|_| "place: a negative start".to_string())?;
        let target = dst.get_mut(at..at + (e - s)).ok_or_else(|| "place: a row runs past dst".to_string())?;
        target.copy_from_slice(&src[s..e]);
    }
    Ok(())
}

/// Each row's place in a batch's output, in one pass: the device lane's rows (`sizes[r] >= 0`) and the
/// native core's good rows (`rest_rows`, increasing, among those with `sizes[r] < 0`; their encodings
/// end at `rest_ends`). Writes `rows` (the good rows in batch order), `offsets` (their starts, then
/// the total), `starts` (each lane row's start, -1 elsewhere: pass 2 writes the lane's rows only) and
/// `rest_starts`; returns how many good rows there are.
pub fn lane_offsets(
    sizes: &[i64],
    rest_rows: &[i64],
    rest_ends: &[i64],
    rows: &mut [i64],
    offsets: &mut [i64],
    starts: &mut [i64],
    rest_starts: &mut [i64],
) -> Result<usize, String> {
    let n = sizes.len();
    if rows.len() < n || offsets.len() < n + 1 || starts.len() != n {
        return Err("lane_offsets: rows, offsets or starts too short".into());
    }
    if rest_ends.len() != rest_rows.len() || rest_starts.len() != rest_rows.len() {
        return Err("lane_offsets: rest_rows, rest_ends and rest_starts differ in length".into());
    }
    let (mut total, mut good, mut next, mut rest_end) = (0i64, 0usize, 0usize, 0i64);
    offsets[0] = 0;
    for (r, &size) in sizes.iter().enumerate() {
        if next < rest_rows.len() && rest_rows[next] == r as i64 {
            let end = rest_ends[next];
            if size >= 0 || end < rest_end {
                return Err("lane_offsets: a native row the lane took, or rest_ends decreasing".into());
            }
            rest_starts[next] = total;
            total += end - rest_end;
            rest_end = end;
            next += 1;
            starts[r] = -1;
        } else if size >= 0 {
            starts[r] = total;
            total += size;
        } else {
            starts[r] = -1;
            continue;
        }
        rows[good] = r as i64;
        good += 1;
        offsets[good] = total;
    }
    if next != rest_rows.len() {
        return Err("lane_offsets: rest_rows not increasing, or outside the batch".into());
    }
    Ok(good)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_offsets_interleave_the_lanes_rows_with_the_native_cores() {
        // rows 0 and 3 the lane's, 1 a dead letter, 2 and 4 the native core's (5 and 2 bytes)
        let sizes = [10, -1, -1, 4, -1];
        let (mut rows, mut offsets, mut starts, mut rest_starts) = ([0; 5], [0; 6], [0; 5], [0; 2]);
        let good = lane_offsets(&sizes, &[2, 4], &[5, 7], &mut rows, &mut offsets, &mut starts, &mut rest_starts);
        assert_eq!(good, Ok(4));
        assert_eq!(rows[..4], [0, 2, 3, 4]);
        assert_eq!(offsets[..5], [0, 10, 15, 19, 21]);
        assert_eq!(starts, [0, -1, -1, 15, -1]);
        assert_eq!(rest_starts, [10, 19]);
        let taken = lane_offsets(&sizes, &[0], &[3], &mut rows, &mut offsets, &mut starts, &mut [0]);
        assert!(taken.is_err());
        assert!(lane_offsets(&sizes, &[7], &[3], &mut rows, &mut offsets, &mut starts, &mut [0]).is_err());
    }

    fn header(name: &str, value: Option<&[u8]>) -> Vec<u8> {
        let mut out = Vec::new();
        put_header(&mut out, name.as_bytes(), value);
        out
    }

    #[test]
    fn record_columns_keep_keys_and_read_back_the_same_header_values() {
        let records: [RecordValues<'_>; 3] =
            [(Some(b"k1"), Some(b"12"), Some(b"{}")), (None, None, None), (Some(b""), None, Some(b"[1]"))];
        let cols = RecordColumns::of(records.iter().copied());
        assert_eq!(cols.keys, b"k1");
        assert_eq!(cols.key_ends, [2, 2, 2]);
        assert_eq!(cols.key_null, [0, 1, 0]);
        let zeros = [0i64; 3];
        let packed = Packed {
            values: b"abc",
            value_ends: &[1, 2, 3],
            keys: &cols.keys,
            key_ends: &cols.key_ends,
            key_null: &cols.key_null,
            headers: &cols.headers,
            header_ends: &cols.header_ends,
            partitions: &zeros,
            offsets: &zeros,
            timestamps: &zeros,
        };
        packed.check().unwrap();
        for (i, (key, latency, attributes)) in records.iter().enumerate() {
            let r = packed.record(i);
            assert_eq!((r.key, r.latency, r.attributes), (*key, *latency, *attributes));
        }
    }

    #[test]
    fn headers_last_occurrence_wins_and_null_values_are_none() {
        let mut headers = header("latency.ms", Some(b"12"));
        headers.extend(header("http.status", Some(b"200")));
        headers.extend(header("latency.ms", Some(b"34")));
        headers.extend(header("attributes", None));
        let first = headers.len() as i64;
        headers.extend(header("attributes", Some(b"{}")));
        let ends = [first, headers.len() as i64];
        let zeros = [0i64, 0];
        let packed = Packed {
            values: b"ab",
            value_ends: &[1, 2],
            keys: b"k",
            key_ends: &[1, 1],
            key_null: &[0, 1],
            headers: &headers,
            header_ends: &ends,
            partitions: &zeros,
            offsets: &zeros,
            timestamps: &zeros,
        };
        assert!(packed.check().is_ok() && packed.check_headers(None).is_ok());
        assert_eq!(packed.header_values(0).unwrap(), (Some(&b"34"[..]), None));
        assert_eq!(packed.header_values(1).unwrap(), (None, Some(&b"{}"[..])));
        assert_eq!(packed.key(0), Some(&b"k"[..]));
        assert_eq!(packed.key(1), None);
        assert_eq!(packed.value(1), b"b");
        let all = super::headers(&headers[..first as usize]).unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!(all[1], (&b"http.status"[..], Some(&b"200"[..])));
        assert_eq!(all[3], (&b"attributes"[..], None));
    }

    #[test]
    fn malformed_columns_are_refused() {
        let cut = &header("latency.ms", Some(b"12"))[..7];
        let zero = [0i64];
        let mut packed = Packed {
            values: b"a",
            value_ends: &[1],
            keys: b"",
            key_ends: &zero,
            key_null: &[1],
            headers: cut,
            header_ends: &[7],
            partitions: &zero,
            offsets: &zero,
            timestamps: &zero,
        };
        assert!(packed.check().is_ok());
        assert!(packed.check_headers(None).unwrap_err().contains("malformed"));
        assert!(packed.check_headers(Some(&[])).is_ok());
        packed.header_ends = &zero;
        packed.headers = b"";
        assert!(packed.check().is_ok());
        packed.value_ends = &[2];
        assert!(packed.check().unwrap_err().contains("past the buffer"));
    }

    #[test]
    fn place_and_copy() {
        let mut dst = vec![0u8; 8];
        place(&mut dst, b"abcde", &[2, 5], &[5, 0]).unwrap();
        assert_eq!(&dst, b"cde\0\0ab\0");
        assert!(place(&mut dst, b"abc", &[3], &[6]).is_err());
        let src: Vec<u8> = (0..(9 << 20)).map(|i| (i % 251) as u8).collect();
        let mut out = vec![0u8; src.len()];
        copy_into(&src, &mut out);
        assert_eq!(src, out);
    }
}
