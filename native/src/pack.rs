//! Copying a batch's values back to back into one buffer (the device lane's staging buffer).
//!
//! The values are separately allocated Python `bytes` objects, scattered over the heap: copying them
//! is bound by memory latency (a miss at the start of each value and the hardware prefetcher ramping
//! up inside it), not by bandwidth. So the copy asks for the values a few places ahead before it
//! needs them, and a large batch is copied by two threads, each with its own half of the bytes.

/// How many values ahead the copy prefetches.
const AHEAD: usize = 8;
/// Below this many bytes one thread copies (starting a second costs more than it saves).
const TWO_THREADS_FROM: usize = 4 << 20;

/// Each value's end offset when they are written back to back.
pub fn ends_of(values: &[&[u8]]) -> Vec<i64> {
    let mut at = 0i64;
    values
        .iter()
        .map(|v| {
            at += v.len() as i64;
            at
        })
        .collect()
}

/// Copy `values` back to back into `dst` (exactly their total size); two threads for large batches.
pub fn pack_into(values: &[&[u8]], dst: &mut [u8]) {
    let total: usize = values.iter().map(|v| v.len()).sum();
    assert_eq!(total, dst.len(), "dst must hold exactly the values");
    if total < TWO_THREADS_FROM || values.len() < 2 {
        copy_run(values, dst);
        return;
    }
    // Split at the value where the first half of the bytes ends.
    let mut split = 0usize;
    let mut bytes = 0usize;
    while split < values.len() && bytes + values[split].len() <= total / 2 {
        bytes += values[split].len();
        split += 1;
    }
    let (first_values, second_values) = values.split_at(split);
    let (first_dst, second_dst) = dst.split_at_mut(bytes);
    std::thread::scope(|scope| {
        scope.spawn(|| copy_run(second_values, second_dst));
        copy_run(first_values, first_dst);
    });
}

fn copy_run(values: &[&[u8]], dst: &mut [u8]) {
    let mut at = 0usize;
    for (i, value) in values.iter().enumerate() {
        if let Some(next) = values.get(i + AHEAD) {
            prefetch(next);
        }
        dst[at..at + value.len()].copy_from_slice(value);
        at += value.len();
    }
}

/// Ask for every cache line of `value` (a hint: no effect on results).
#[inline]
fn prefetch(value: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        for line in (0..value.len()).step_by(64) {
            // SAFETY: `line` is inside `value`; prefetching never faults and changes no memory.
            unsafe { _mm_prefetch(value.as_ptr().add(line).cast::<i8>(), _MM_HINT_T0) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values_of(sizes: &[usize]) -> Vec<Vec<u8>> {
        sizes.iter().enumerate().map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect()).collect()
    }

    fn check(sizes: &[usize]) {
        let owned = values_of(sizes);
        let values: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let want: Vec<u8> = owned.concat();
        let mut got = vec![0u8; want.len()];
        pack_into(&values, &mut got);
        assert_eq!(got, want);
        let ends = ends_of(&values);
        assert_eq!(ends.len(), sizes.len());
        assert_eq!(ends.last().copied().unwrap_or(0) as usize, want.len());
    }

    #[test]
    fn small_batches_and_empty_values() {
        check(&[]);
        check(&[0]);
        check(&[0, 0, 5, 0, 1]);
        check(&[3; 20]);
    }

    #[test]
    fn large_batches_split_over_two_threads() {
        check(&[1 << 20; 9]); // above the two-thread threshold, an odd count
        check(&[(4 << 20) + 7, 1, 0, 2]); // one value holds more than half of the bytes
        let mixed: Vec<usize> = (0..20_000).map(|i| (i * 7919) % 2048).collect();
        check(&mixed);
    }
}
