//! A numeric column's JSON array read without a serde visit per value: the decoder's columns are mostly
//! numbers (at 1,024 ranks, half of every message's bytes), each read here by a tight loop over the array's
//! text and an exact parser (fast-float2: correctly rounded, as Python's float() reads a number).
//!
//! The text is not checked before (serde_json's `RawValue` or the columnar reader's unread rest): each number
//! is held to JSON's grammar here (`float`, `int`); anything else in the array (strings, nesting, other
//! literals, a number JSON does not allow) is not read here: the caller then reads the column with
//! serde_json, which decides as it always did.

/// JSON's whitespace skipped from `at`: where the next token is.
#[inline]
pub fn skip_space(text: &[u8], mut at: usize) -> usize {
    while matches!(text.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Read the `n` numbers of the JSON array `text` starts with, in order, each by `read` (from its first
/// byte on: its value and its length, or None), handing each value to `each` with its position: the
/// array's length; None (at once) when it is not an array of exactly `n` numbers, or `read` or `each` says
/// no. `repeats`: a value written as the one before it is that one's, not read again (`again`: worth it
/// for floats, whose reading costs more than the comparison; a small integer's costs less).
pub fn each_number<T: Copy>(
    text: &[u8],
    n: usize,
    repeats: bool,
    read: impl Fn(&[u8]) -> Option<(T, usize)>,
    mut each: impl FnMut(usize, T) -> bool,
) -> Option<usize> {
    if text.first() != Some(&b'[') {
        return None;
    }
    let mut at = skip_space(text, 1);
    if text.get(at) == Some(&b']') {
        return (n == 0).then_some(at + 1);
    }
    let mut last: Option<(usize, usize, T)> = None; // the value before, its text's start and length
    for i in 0..n {
        let (value, len) = match last {
            Some((from, len, value)) if repeats && again(text, at, from, len) => (value, len),
            _ => read(&text[at..])?,
        };
        last = Some((at, len, value));
        if !each(i, value) {
            return None;
        }
        at = skip_space(text, at + len);
        match text.get(at) {
            Some(b',') if i + 1 < n => at = skip_space(text, at + 1),
            Some(b']') => return (i + 1 == n).then_some(at + 1),
            _ => return None, // more than n values (or not an array of numbers)
        }
    }
    None // n == 0 and the array is not empty
}

/// Whether the text at `at` is the number read before (`len` bytes from `from`) and ends where it did: the
/// same bytes, then one no number goes on with (a comma, a bracket, a space), so `read` would give the
/// same value and length again (a column may repeat the value before: a start time over a step's
/// tensor-parallel ranks), without reading it.
#[inline]
fn again(text: &[u8], at: usize, from: usize, len: usize) -> bool {
    matches!(
        text.get(at + len),
        Some(b',' | b']' | b' ' | b'\t' | b'\n' | b'\r')
    ) && text[at..at + len] == text[from..from + len]
}

/// How many digits `text` starts with.
#[inline]
fn digits(text: &[u8]) -> usize {
    text.iter().take_while(|b| b.is_ascii_digit()).count()
}

/// The JSON number `text` starts with: its value, correctly rounded (an integer as exactly as a float
/// holds it, as `i as f64` does), and its length. The parser takes more than JSON does (`01`, `1.`, `.5`,
/// `inf`): a JSON number's integer part is checked here, where those differ; from a fraction's first digit
/// on the two read the same (the parser stops where JSON's number ends, as at `1e` or `1.5.`).
#[inline]
pub fn float(text: &[u8]) -> Option<(f64, usize)> {
    let sign = usize::from(text.first() == Some(&b'-'));
    let end = sign + integer_part(&text[sign..])?;
    if text.get(end) == Some(&b'.') && !text.get(end + 1).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    fast_float2::parse_partial(text).ok()
}

/// The length of JSON's integer part `text` starts with (`0` or digits not led by 0); None if none.
#[inline]
fn integer_part(text: &[u8]) -> Option<usize> {
    match digits(text) {
        0 => None,
        1 => Some(1),
        _ if text[0] == b'0' => None,
        many => Some(many),
    }
}

/// The JSON integer `text` starts with, when it is plainly one: at most 18 digits (no overflow), perhaps
/// after a minus; and its length. Not `-0` (serde_json reads it as the float -0.0, which no integer field
/// takes), nor a number with a fraction or an exponent (`3.0` is a float to the contract), nor a longer
/// one: serde_json decides those.
#[inline]
pub fn int(text: &[u8]) -> Option<(i64, usize)> {
    let negative = text.first() == Some(&b'-');
    let digits = &text[usize::from(negative)..];
    let len = integer_part(digits)?;
    if len > 18 || matches!(digits.get(len), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    let magnitude = digits[..len]
        .iter()
        .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
    match (negative, magnitude) {
        (true, 0) => None,
        (true, m) => Some((-m, len + 1)),
        (false, m) => Some((m, len)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, n: usize) -> Option<Vec<f64>> {
        let mut out = Vec::new();
        let read = each_number(text.as_bytes(), n, true, float, |i, value| {
            assert_eq!(i, out.len());
            out.push(value);
            true
        });
        read.map(|len| {
            assert_eq!(text.as_bytes()[len - 1], b']');
            out
        })
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
    fn a_number_again_only_where_it_ends_as_before() {
        assert_eq!(read("[1.5,1.5, 1.5 ]", 3).unwrap(), [1.5, 1.5, 1.5]);
        assert_eq!(read("[1.5,1.55,1.5e2]", 3).unwrap(), [1.5, 1.55, 150.0]);
        assert_eq!(read("[15,1,1]", 3).unwrap(), [15.0, 1.0, 1.0]);
        assert!(read("[1.5,1.5.]", 2).is_none());
        assert!(read("[1.5,1.5e]", 2).is_none());
        assert!(read("[1.5,1.5", 2).is_none());
        assert!(read("[1.5,1.5,]", 2).is_none());
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
        assert_eq!(int(b"017"), None);
        assert_eq!(int(b"-017"), None);
        assert_eq!(int(b"-x"), None);
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
        // what the number parser takes and JSON does not
        for text in [
            "01", "-01", "1.", "1.e5", ".5", "-.5", "-inf", "-nan", "+1", "-",
        ] {
            assert_eq!(float(text.as_bytes()), None, "{text}");
        }
        // where JSON's number ends (what follows is then no comma or bracket: not an array of numbers)
        assert_eq!(float(b"1e"), Some((1.0, 1)));
        assert_eq!(float(b"1e+]"), Some((1.0, 1)));
        assert_eq!(float(b"1.5.2"), Some((1.5, 3)));
        assert!(read("[1e]", 1).is_none());
        assert!(read("[1.5.2]", 1).is_none());
        assert!(read("[0x1]", 1).is_none());
        assert_eq!(float(b"1.5e+3,"), Some((1500.0, 6)));
        assert_eq!(float(b"0.5]"), Some((0.5, 3)));
        assert_eq!(float(b"-0.0e-0 "), Some((-0.0, 7)));
    }
}
