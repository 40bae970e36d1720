//! A numeric column's JSON array read without a serde visit per value: the decoder's columns are mostly
//! numbers (at 1,024 ranks, half of every message's bytes), each read here by a tight loop over the array's
//! text and an exact parser (fast-float2: correctly rounded, as Python's float() reads a number).
//!
//! The text is one JSON value serde_json has already checked (a `RawValue`), so every number in it is
//! well-formed JSON; anything else in the array (strings, nesting, other literals) is not read here: the
//! caller then reads the column with serde_json, which decides as it always did.

/// JSON's whitespace.
fn skip_space(text: &[u8], mut at: usize) -> usize {
    while matches!(text.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Read the `n` numbers of the JSON array `text` in order, each by `read` (from its first byte on: its
/// value and its length, or None), handing each value to `each` with its position; false (at once) when
/// `text` is not an array of exactly `n` numbers, or `read` or `each` says no.
pub fn each_number<T>(
    text: &[u8],
    n: usize,
    read: impl Fn(&[u8]) -> Option<(T, usize)>,
    mut each: impl FnMut(usize, T) -> bool,
) -> bool {
    if text.first() != Some(&b'[') {
        return false;
    }
    let mut at = skip_space(text, 1);
    if text.get(at) == Some(&b']') {
        return n == 0;
    }
    for i in 0..n {
        let Some((value, len)) = read(&text[at..]) else {
            return false;
        };
        if !each(i, value) {
            return false;
        }
        at = skip_space(text, at + len);
        match text.get(at) {
            Some(b',') if i + 1 < n => at = skip_space(text, at + 1),
            Some(b']') => return i + 1 == n,
            _ => return false, // more than n values (or not an array of numbers)
        }
    }
    false // n == 0 and the array is not empty
}

/// The JSON number `text` starts with: its value, correctly rounded (an integer as exactly as a float holds
/// it, as `i as f64` does), and its length.
pub fn float(text: &[u8]) -> Option<(f64, usize)> {
    match text.first() {
        Some(b'-' | b'0'..=b'9') => fast_float2::parse_partial(text).ok(),
        _ => None,
    }
}

/// The JSON integer `text` starts with, when it is plainly one: digits, perhaps after a minus, at most 18
/// of them (no overflow). Not `-0` (serde_json reads it as the float -0.0, which no integer field takes),
/// nor a number with a fraction or an exponent (`3.0` is a float to the contract), nor a longer one:
/// serde_json decides those.
pub fn int(text: &[u8]) -> Option<(i64, usize)> {
    let negative = text.first() == Some(&b'-');
    let start = usize::from(negative);
    let mut at = start;
    let mut magnitude = 0i64;
    while let Some(&d @ b'0'..=b'9') = text.get(at) {
        if at - start == 18 {
            return None;
        }
        magnitude = magnitude * 10 + i64::from(d - b'0');
        at += 1;
    }
    match (text.get(at), negative, magnitude) {
        (_, _, _) if at == start => None,
        (Some(b'.' | b'e' | b'E'), _, _) | (_, true, 0) => None,
        (_, true, m) => Some((-m, at)),
        (_, false, m) => Some((m, at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, n: usize) -> Option<Vec<f64>> {
        let mut out = Vec::new();
        let read = each_number(text.as_bytes(), n, float, |i, value| {
            assert_eq!(i, out.len());
            out.push(value);
            true
        });
        read.then_some(out)
    }

    #[test]
    fn arrays_of_exactly_n_numbers() {
        assert_eq!(read("[1, -2.5e3 ,\n0]", 3).unwrap(), [1.0, -2500.0, 0.0]);
        assert_eq!(read("[ ]", 0).unwrap(), Vec::<f64>::new());
        assert!(read("[1,2]", 3).is_none());
        assert!(read("[1,2,3]", 2).is_none());
        assert!(read("[1]", 0).is_none());
        assert!(read("[1,\"2\"]", 2).is_none());
        assert!(read("[1,[2]]", 2).is_none());
        assert!(read("[1,null]", 2).is_none());
        assert!(read("1", 1).is_none());
    }

    #[test]
    fn integers_only_when_plain() {
        assert_eq!(int(b"-17,"), Some((-17, 3)));
        assert_eq!(int(b"0]"), Some((0, 1)));
        assert_eq!(
            int(b"999999999999999999"),
            Some((999_999_999_999_999_999, 18))
        );
        assert_eq!(int(b"1000000000000000000"), None); // 19 digits: serde_json decides
        assert_eq!(int(b"-0"), None);
        assert_eq!(int(b"-0 "), None);
        assert_eq!(int(b"3.0"), None);
        assert_eq!(int(b"1e2"), None);
        assert_eq!(int(b"1E2"), None);
        assert_eq!(int(b"-"), None);
        assert_eq!(int(b"\"1\""), None);
    }

    #[test]
    fn floats_correctly_rounded() {
        assert_eq!(float(b"0.1,"), Some((0.1, 3)));
        assert_eq!(float(b"9007199254740993"), Some((9007199254740992.0, 16)));
        assert_eq!(
            float(b"-0").map(|(v, _)| v.to_bits()),
            Some((-0.0f64).to_bits())
        );
        assert_eq!(
            float(b"4.9406564584124654e-324"),
            Some((f64::from_bits(1), 23))
        );
        assert_eq!(float(b"1e400"), Some((f64::INFINITY, 5)));
        assert_eq!(float(b"nan"), None);
        assert_eq!(float(b"inf"), None);
        assert_eq!(float(b"true"), None);
    }
}
