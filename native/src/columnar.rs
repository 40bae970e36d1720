//! The usual columnar message read without serde: `{"schema", "source", "seq", "columns": [{"kind", "n",
//! "data": {column: [values] or one value}}]}`, what the simulator and the agents send. serde_json's
//! structure walk (a visit per value, and a pass over every numeric column to find its end) was half the
//! decoder's time on them; here each column is read by one loop over its text.
//!
//! It answers only for messages it reads plainly: each key once and known (the envelope's, a batch's `kind`
//! and `n` before its `data`, the kind's fields), strings without escapes, integers of at most 18 digits,
//! valid values. Anything else (row-wise samples, unknown fields, a key twice, an escape, any doubt) gives
//! None, and serde_json reads the message as it always did (`TelemetryDecoder::parse`): the definition this
//! reader must equal wherever it answers, which `tests/unit/test_native_decode.py` checks.

use std::borrow::Cow;

use super::{
    valid_source, Cell, Envelope, Joined, Part, Rule, Scalar, Strings, TelemetryDecoder, Type,
};
use crate::numbers;

/// The message `text` (valid UTF-8), read; None: serde_json decides.
pub(super) fn read<'de>(
    dec: &TelemetryDecoder,
    text: &'de str,
    strings: &mut Strings<'de>,
) -> Option<Envelope<'de>> {
    let mut r = Reader { text, at: 0 };
    let (mut schema, mut source, mut seq, mut batches) = (None, None, None, None);
    r.object(|r, key| {
        match key {
            "schema" if schema.is_none() => schema = Some(r.string()?),
            "source" if source.is_none() => source = Some(r.string()?),
            "seq" if seq.is_none() => {
                seq = Some(match r.null() {
                    true => None,
                    false => Some(u64::try_from(r.int()?).ok()?),
                })
            }
            "columns" if batches.is_none() => {
                batches = Some(match r.null() {
                    true => None,
                    false => Some(r.batches(dec, strings)?),
                })
            }
            _ => return None, // row-wise samples, another field, a key twice: serde_json decides
        }
        Some(())
    })?;
    if r.space() != text.len() || schema? != dec.schema {
        return None;
    }
    let (source, seq) = (source?, seq.flatten());
    if !valid_source(source) || !dec.valid_seq(seq) {
        return None;
    }
    Envelope::of(dec, Cow::Borrowed(source), seq, None, batches?)
}

struct Reader<'de> {
    text: &'de str,
    at: usize,
}

impl<'de> Reader<'de> {
    fn bytes(&self) -> &'de [u8] {
        self.text.as_bytes()
    }

    /// Whitespace skipped: where the next token starts.
    fn space(&mut self) -> usize {
        self.at = numbers::skip_space(self.bytes(), self.at);
        self.at
    }

    fn peek(&mut self) -> Option<u8> {
        let at = self.space();
        self.bytes().get(at).copied()
    }

    fn byte(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn word(&mut self, word: &str) -> bool {
        self.space();
        let found = self.text[self.at..].starts_with(word);
        if found {
            self.at += word.len();
        }
        found
    }

    fn null(&mut self) -> bool {
        self.word("null")
    }

    /// A string without escapes or control characters (either: serde_json decides), borrowed.
    fn string(&mut self) -> Option<&'de str> {
        self.byte(b'"')?;
        let start = self.at;
        let len = self.bytes()[start..]
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if self.bytes()[start + len] != b'"' {
            return None;
        }
        self.at = start + len + 1;
        Some(&self.text[start..start + len]) // between two quotes: on character boundaries
    }

    fn int(&mut self) -> Option<i64> {
        let at = self.space();
        let (value, len) = numbers::int(&self.bytes()[at..])?;
        self.at += len;
        Some(value)
    }

    /// After a value in an object or array: whether another follows (a comma), or it closes with `close`.
    fn more(&mut self, close: u8) -> Option<bool> {
        let next = self.peek()?;
        self.at += 1;
        match next {
            b',' => Some(true),
            _ => (next == close).then_some(false),
        }
    }

    /// An object, each key and the reader at its value handed to `each` (which reads the value).
    fn object(&mut self, mut each: impl FnMut(&mut Self, &'de str) -> Option<()>) -> Option<()> {
        self.byte(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.byte(b':')?;
            each(self, key)?;
            if !self.more(b'}')? {
                return Some(());
            }
        }
    }

    /// An array, `each` reading its values in turn (with their position).
    fn array(&mut self, mut each: impl FnMut(&mut Self, usize) -> Option<()>) -> Option<usize> {
        self.byte(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(0);
        }
        let mut count = 0;
        loop {
            each(self, count)?;
            count += 1;
            if !self.more(b']')? {
                return Some(count);
            }
        }
    }

    fn batches(&mut self, dec: &TelemetryDecoder, strings: &mut Strings<'de>) -> Option<Vec<Part>> {
        let mut out = Vec::new();
        let mut left = dec.max_rows; // (as the serde reader: no batch's columns made beyond the limit)
        self.array(|r, i| {
            if i >= dec.max_batches {
                return None;
            }
            let part = r.batch(dec, strings, left)?;
            left -= part.n;
            out.push(part);
            Some(())
        })?;
        Some(out)
    }

    fn batch(
        &mut self,
        dec: &TelemetryDecoder,
        strings: &mut Strings<'de>,
        left: usize,
    ) -> Option<Part> {
        let (mut kind, mut n, mut columns) = (None, None, None);
        self.object(|r, key| {
            match key {
                "kind" if kind.is_none() => kind = Some(dec.kind_index(r.string()?)?),
                "n" if n.is_none() => {
                    n = Some(usize::try_from(r.int()?).ok().filter(|&n| n <= left)?)
                }
                "data" if columns.is_none() => columns = Some(r.data(dec, kind?, n?, strings)?),
                _ => return None, // another field, a key twice: serde_json decides
            }
            Some(())
        })?;
        Some(Part {
            kind: kind?,
            start: 0,
            n: n?,
            columns: columns?,
        })
    }

    fn data(
        &mut self,
        dec: &TelemetryDecoder,
        kind: usize,
        n: usize,
        strings: &mut Strings<'de>,
    ) -> Option<Joined> {
        let kind = &dec.kinds[kind];
        let mut out = Joined::zeroed(kind, n);
        let mut given = vec![false; kind.rules.len()];
        self.object(|r, key| {
            let i = *kind.index.get(key)?;
            if given[i] {
                return None;
            }
            given[i] = true;
            r.column(&kind.rules[i], n, &mut out, strings)
        })?;
        out.fill_defaults(kind, &given, n, strings)?;
        Some(out)
    }

    /// A column's array of `n` values, or one value standing for every row, into its rows of `out`.
    fn column(
        &mut self,
        rule: &Rule,
        n: usize,
        out: &mut Joined,
        strings: &mut Strings<'de>,
    ) -> Option<()> {
        if self.peek()? != b'[' {
            let cell = rule.check(self.scalar(rule)?, None, strings, &mut Vec::new())?;
            out.fill(rule, n, cell);
            return Some(());
        }
        if matches!(rule.ty, Type::Number | Type::Integer) {
            self.at += out.read_numbers(rule, n, &self.text[self.at..], strings)?;
            return Some(());
        }
        if matches!(rule.ty, Type::Text) {
            return self.texts(rule, n, out, strings);
        }
        let mut valid = Vec::new(); // (Booleans: the other types are read above)
        let count = self.array(|r, i| {
            if i >= n {
                return None;
            }
            let cell = rule.check(r.scalar(rule)?, None, strings, &mut valid)?;
            out.put(rule, n, i, cell);
            Some(())
        })?;
        (count == n).then_some(())
    }

    /// A string column's array of `n` values into its rows of `out`. A value whose bytes are those of the
    /// one before it (most are: a column repeats a few values) takes its code at once: it reads as that
    /// one did (a plain string: no quote, escape or control character inside) and `Rule::check` would give
    /// that code again, without the scan, the comparison and the cells passed between them. Any other value
    /// is read and checked as every column's are.
    fn texts(
        &mut self,
        rule: &Rule,
        n: usize,
        out: &mut Joined,
        strings: &mut Strings<'de>,
    ) -> Option<()> {
        let codes = &mut out.codes[rule.row * n..(rule.row + 1) * n];
        let (mut valid, mut last) = (Vec::new(), None::<(u32, &'de str)>);
        let count = self.array(|r, i| {
            if i >= n {
                return None;
            }
            if let Some((code, text)) = last {
                if r.again(text) {
                    codes[i] = code;
                    return Some(());
                }
            }
            let text = r.string()?;
            let value = Scalar::Text(Cow::Borrowed(text));
            let Cell::Code(code) = rule.check(value, last.map(|(c, _)| c), strings, &mut valid)?
            else {
                return None;
            };
            last = Some((code, text));
            codes[i] = code;
            Some(())
        })?;
        (count == n).then_some(())
    }

    /// Whether the next value is the string `text` (one `string` read before), then past it.
    fn again(&mut self, text: &str) -> bool {
        let at = self.space();
        let (rest, len) = (&self.bytes()[at..], text.len());
        let same = rest.len() > len + 1
            && rest[0] == b'"'
            && rest[len + 1] == b'"'
            && &rest[1..=len] == text.as_bytes();
        if same {
            self.at = at + len + 2;
        }
        same
    }

    /// One value of the JSON type `rule` takes (anything else: serde_json decides).
    fn scalar(&mut self, rule: &Rule) -> Option<Scalar<'de>> {
        Some(match rule.ty {
            Type::Text => Scalar::Text(Cow::Borrowed(self.string()?)),
            Type::Integer => Scalar::Int(self.int()?),
            Type::Number => {
                let at = self.space();
                let (value, len) = numbers::float(&self.bytes()[at..])?;
                self.at += len;
                Scalar::Float(value)
            }
            Type::Boolean if self.word("true") => Scalar::Bool(true),
            Type::Boolean if self.word("false") => Scalar::Bool(false),
            Type::Boolean => return None,
        })
    }
}
