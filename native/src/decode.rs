//! A fast path for telemetry envelopes (`streams/contract/envelope.py`, whose rules are the definition):
//! the bytes of one message in, the typed columns of its samples out.
//!
//! A message is answered here only when every sample in it is certainly valid under those rules (the rules
//! themselves come from the schema files, handed over by `streams/contract/native_decode.py`): valid UTF-8,
//! strict JSON, each known field once, every value of the right JSON type and within its bounds, lengths
//! and enumerations, every column of a batch `n` long, one kind among the row-wise samples. Anything else
//! (a bad sample, a duplicate key, an escaped surrogate, nesting beyond serde_json's limit, an integer
//! written as `3.0`) is deferred: the Python decoder decides, and names the reason. So the two cannot
//! disagree on the messages answered here; `tests/unit/test_native_decode.py` checks it on the fuzz corpora.
//!
//! Strings come out as codes into one list of the message's distinct strings (most columns repeat a few
//! values), numbers as little-endian buffers that numpy reads without a copy (`crate::buffer`).
//!
//! serde_json reads any message (`TelemetryDecoder::parse`); the usual columnar layout is first tried by a
//! reader of its own (`columnar`), a loop per column, which answers only where it reads plainly and else
//! leaves the message to serde_json.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use memchr::memmem;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::buffer::{Buffer, Owned};
use crate::numbers;

#[path = "columnar.rs"]
// beside the others (the Makefile rebuilds on native/src/*.rs), a child of this one
mod columnar;

/// A multiply-rotate hash (as in rustc's FxHash) of a string's length and every 8-byte word of it: the keys
/// are a message's strings, mostly short names (`dp-3`, `device:node7/gpu2`), so a few words each.
#[derive(Default)]
struct Fx(u64);

impl Fx {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        // every byte counts: a hash of a string's ends alone let strings that differ only in the middle
        // all collide, so one crafted message could make interning quadratic
        self.add(bytes.len() as u64);
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// The JSON type a field takes (`FieldRule.kind`).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Type {
    Number,
    Integer,
    Text,
    Boolean,
}

impl Type {
    /// Its buffer's place among a part's buffers (float64, int64, bool, uint32), as `native_decode.py` reads them.
    fn code(self) -> usize {
        match self {
            Type::Number => 0,
            Type::Integer => 1,
            Type::Boolean => 2,
            Type::Text => 3,
        }
    }
}

/// One JSON scalar as read; arrays, objects and null are never a valid field value of a sample.
#[derive(Clone)]
enum Scalar<'a> {
    Int(i64),
    Big(u64), // beyond i64
    Float(f64),
    Bool(bool),
    Text(Cow<'a, str>),
}

struct Rule {
    ty: Type,
    slot: usize, // in TelemetryDecoder.slots: where a row-wise sample's value of this field is held
    row: usize, // which of its kind's columns of its type it is: its rows in a part's buffer of that type
    default: Option<Scalar<'static>>, // None: required
    floats: [Option<f64>; 3], // number: minimum, maximum, exclusive minimum
    ints: [Option<i64>; 3], // integer: the same
    min_len: usize,
    max_len: Option<usize>,
    allowed: Option<Vec<String>>,
}

struct Kind {
    name: String,
    rules: Vec<Rule>,
    index: FxMap<String, usize>, // field name -> rule
    counts: [usize; 4],          // how many columns of each type (Type::code)
    time: Option<usize>, // the row of its event time among its float columns (a number field)
}

impl Kind {
    /// The lowest and highest event time of a part's `n` rows, as `SampleBatch.time_bounds` tells them, or
    /// None (not told here: Python tells them): no event time among the floats, no rows, or an end that is
    /// zero (numpy's pick between 0.0 and -0.0 is its own). A message answered here holds no NaN nor
    /// infinity (strict JSON), so the ends of its rows are their minimum and maximum bit for bit.
    fn time_bounds(&self, floats: &[f64], n: usize) -> Option<(f64, f64)> {
        let row = self.time?;
        let times = floats.get(row * n..(row + 1) * n)?;
        let (&first, rest) = times.split_first()?;
        let (mut low, mut high) = (first, first);
        for &t in rest {
            if t.is_nan() {
                return None;
            }
            low = if t < low { t } else { low };
            high = if t > high { t } else { high };
        }
        (!first.is_nan() && low != 0.0 && high != 0.0).then_some((low, high))
    }
}

/// A row-wise sample's column as read (a part's length is known only at its end).
enum Values {
    Floats(Vec<f64>),
    Ints(Vec<i64>),
    Bools(Vec<u8>),
    Codes(Vec<u32>, Vec<bool>), // codes into the message's strings; which codes are known valid here
}

/// One value, checked under its field's rule.
#[derive(Clone, Copy)]
enum Cell {
    Float(f64),
    Int(i64),
    Bool(u8),
    Code(u32),
}

impl Values {
    fn push(&mut self, cell: Cell) {
        match (self, cell) {
            (Values::Floats(out), Cell::Float(v)) => out.push(v),
            (Values::Ints(out), Cell::Int(v)) => out.push(v),
            (Values::Bools(out), Cell::Bool(v)) => out.push(v),
            (Values::Codes(out, _), Cell::Code(v)) => out.push(v),
            _ => unreachable!("a cell is checked under its column's rule"),
        }
    }
}

struct Part {
    kind: usize,
    start: usize,
    n: usize,
    columns: Joined,
}

/// The distinct strings of one message, numbered in order of first appearance; and whether a -0.0 read in
/// it is certainly one (serde_json reads the integer `-0` as -0.0 too, where Python reads 0).
#[derive(Default)]
struct Strings<'a> {
    codes: FxMap<Cow<'a, str>, u32>,
    list: Vec<Cow<'a, str>>,
    negative_zero: bool,
}

/// Whether `text` may hold the integer `-0` (a `-0` not followed by a fraction, exponent or digit).
fn has_integer_minus_zero(text: &str) -> bool {
    let bytes = text.as_bytes();
    memmem::find_iter(bytes, b"-0")
        .any(|at| !matches!(bytes.get(at + 2), Some(b'.' | b'e' | b'E' | b'0'..=b'9')))
}

impl<'a> Strings<'a> {
    fn code(&mut self, text: Cow<'a, str>) -> u32 {
        if let Some(&code) = self.codes.get(text.as_ref()) {
            return code;
        }
        let code = self.list.len() as u32;
        self.list.push(text.clone());
        self.codes.insert(text, code);
        code
    }
}

fn defer<E: de::Error>() -> E {
    E::custom("deferred to the Python decoder")
}

impl Rule {
    fn empty(&self, capacity: usize) -> Values {
        match self.ty {
            Type::Number => Values::Floats(Vec::with_capacity(capacity)),
            Type::Integer => Values::Ints(Vec::with_capacity(capacity)),
            Type::Boolean => Values::Bools(Vec::with_capacity(capacity)),
            Type::Text => Values::Codes(Vec::with_capacity(capacity), Vec::new()),
        }
    }

    fn valid_text(&self, text: &str) -> bool {
        if let Some(allowed) = &self.allowed {
            return allowed.iter().any(|a| a == text);
        }
        let len = text.chars().count(); // code points, as Python counts them
        len >= self.min_len && self.max_len.is_none_or(|m| len <= m)
    }

    /// `value` if it is valid under this rule (strings as codes), None if it is not. `last`: the code of
    /// the value before it in its column, if any; `valid`: the codes known valid in the column.
    fn check<'a>(
        &self,
        value: Scalar<'a>,
        last: Option<u32>,
        strings: &mut Strings<'a>,
        valid: &mut Vec<bool>,
    ) -> Option<Cell> {
        match (self.ty, value) {
            (Type::Number, value) => {
                let v = match value {
                    Scalar::Int(i) => i as f64,
                    Scalar::Big(u) => u as f64,
                    Scalar::Float(f) => f,
                    _ => return None,
                };
                self.float(v, strings).map(Cell::Float)
            }
            (Type::Integer, Scalar::Int(v)) => self.int(v).map(Cell::Int),
            (Type::Boolean, Scalar::Bool(b)) => Some(Cell::Bool(u8::from(b))),
            (Type::Text, Scalar::Text(text)) => {
                if let Some(last) = last {
                    if strings.list[last as usize] == text {
                        return Some(Cell::Code(last)); // the value before it again (most are): no lookup
                    }
                }
                let code = strings.code(text);
                let c = code as usize;
                if !valid.get(c).is_some_and(|v| *v) {
                    if !self.valid_text(&strings.list[c]) {
                        return None;
                    }
                    if valid.len() <= c {
                        valid.resize(c + 1, false);
                    }
                    valid[c] = true; // each distinct string is checked once per column
                }
                Some(Cell::Code(code))
            }
            _ => None,
        }
    }

    fn float(&self, v: f64, strings: &Strings) -> Option<f64> {
        let [min, max, above] = self.floats;
        let bad = !v.is_finite()
            || (v == 0.0 && v.is_sign_negative() && !strings.negative_zero)
            || min.is_some_and(|m| v < m)
            || max.is_some_and(|m| v > m)
            || above.is_some_and(|m| v <= m);
        (!bad).then_some(v)
    }

    fn int(&self, v: i64) -> Option<i64> {
        let [min, max, above] = self.ints;
        let bad = v.unsigned_abs() > 1 << 62
            || min.is_some_and(|m| v < m)
            || max.is_some_and(|m| v > m)
            || above.is_some_and(|m| v <= m);
        (!bad).then_some(v)
    }

    /// Append `value` to a row-wise column if it is valid under this rule; false (nothing appended) if not.
    fn push<'a>(&self, value: Scalar<'a>, into: &mut Values, strings: &mut Strings<'a>) -> bool {
        let mut none = Vec::new();
        let (last, valid) = match into {
            Values::Codes(out, valid) => (out.last().copied(), valid),
            _ => (None, &mut none),
        };
        match self.check(value, last, strings, valid) {
            Some(cell) => {
                into.push(cell);
                true
            }
            None => false,
        }
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string, number or boolean")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Scalar::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(i64::try_from(v).map_or(Scalar::Big(v), Scalar::Int))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Scalar::Float(v))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Text(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Text(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Scalar::Text(Cow::Owned(v)))
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

/// A value of a field the contract does not know, read and dropped. Unlike serde's `IgnoredAny` it goes
/// through serde_json's nesting limit (128), as Python's parser has one (deeper: malformed_json there).
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Skip)
    }
}

/// A string key or value, borrowed from the message when it has no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_str(ScalarVisitor)? {
            Scalar::Text(text) => Ok(Text(text)),
            _ => Err(defer()),
        }
    }
}

/// `null` or what `S` reads.
struct Nullable<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Nullable<S> {
    type Value = Option<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for Nullable<S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("null or a value")
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(d).map(Some)
    }
}

/// What the parse of one message needs: the rules, and the message's strings.
struct Ctx<'s, 'de> {
    dec: &'s TelemetryDecoder,
    strings: &'s mut Strings<'de>,
}

struct Envelope<'de> {
    source: Cow<'de, str>,
    seq: Option<u64>,
    total: usize,
    parts: Vec<Part>,
}

impl<'de> Visitor<'de> for Ctx<'_, 'de> {
    type Value = Envelope<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a telemetry envelope")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Ctx { dec, strings } = self;
        let (mut schema, mut source, mut seq) = (false, None, None);
        let (mut rows, mut batches): (Option<Option<Part>>, Option<Option<Vec<Part>>>) =
            (None, None);
        while let Some(key) = map.next_key::<Text>()? {
            match key.0.as_ref() {
                // a key given twice: the last value counts, as in the Python decoder (each must be valid here)
                "schema" => {
                    schema = map.next_value::<Text>()?.0 == dec.schema;
                    if !schema {
                        return Err(defer());
                    }
                }
                "source" => {
                    let text = map.next_value::<Text>()?.0;
                    if !valid_source(&text) {
                        return Err(defer());
                    }
                    source = Some(text);
                }
                "seq" => {
                    let value = map.next_value::<Option<u64>>()?;
                    if !dec.valid_seq(value) {
                        return Err(defer());
                    }
                    seq = Some(value);
                }
                "samples" => {
                    let seed = Nullable(Rows(Ctx {
                        dec,
                        strings: &mut *strings,
                    }));
                    rows = Some(map.next_value_seed(seed)?);
                }
                "columns" => {
                    let seed = Nullable(Batches(Ctx {
                        dec,
                        strings: &mut *strings,
                    }));
                    batches = Some(map.next_value_seed(seed)?);
                }
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        let (Some(source), true) = (source, schema) else {
            return Err(defer());
        };
        Envelope::of(
            dec,
            source,
            seq.flatten(),
            rows.flatten(),
            batches.flatten(),
        )
        .ok_or_else(defer)
    }
}

fn valid_source(text: &str) -> bool {
    (1..=256).contains(&text.chars().count())
}

impl<'de> Envelope<'de> {
    /// The message read, its parts numbered in order (rows first); None if it has neither form (null counts
    /// as absent) or too many samples.
    fn of(
        dec: &TelemetryDecoder,
        source: Cow<'de, str>,
        seq: Option<u64>,
        rows: Option<Part>,
        batches: Option<Vec<Part>>,
    ) -> Option<Self> {
        if rows.is_none() && batches.is_none() {
            return None;
        }
        let mut parts = Vec::new();
        let mut total = 0;
        if let Some(part) = rows {
            total = part.n;
            if part.n > 0 {
                parts.push(part);
            }
        }
        for mut part in batches.unwrap_or_default() {
            let n = part.n;
            if n > 0 {
                part.start = total;
                parts.push(part);
            }
            total += n;
        }
        (total <= dec.max_rows).then_some(Envelope {
            source,
            seq,
            total,
            parts,
        })
    }
}

/// The row-wise samples: one part, all of one kind.
struct Rows<'s, 'de>(Ctx<'s, 'de>);

impl<'de> DeserializeSeed<'de> for Rows<'_, 'de> {
    type Value = Part;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Part, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Rows<'_, 'de> {
    type Value = Part;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of samples")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Part, A::Error> {
        let Ctx { dec, strings } = self.0;
        let mut slots: Vec<Option<Scalar<'de>>> = vec![None; dec.slots.len()];
        let mut part: Option<(usize, Vec<Values>)> = None; // kind, columns
        let mut n = 0;
        while seq
            .next_element_seed(Row {
                dec,
                slots: &mut slots,
            })?
            .is_some()
        {
            let kind = match slots[dec.kind_slot].take() {
                Some(Scalar::Text(name)) => dec.kind_index(&name).ok_or_else(defer)?,
                _ => return Err(defer()),
            };
            let rules = &dec.kinds[kind].rules;
            let (first, columns) =
                part.get_or_insert_with(|| (kind, rules.iter().map(|r| r.empty(64)).collect()));
            if *first != kind || n >= dec.max_rows {
                return Err(defer()); // mixed kinds: positions per kind are the Python decoder's business
            }
            for (rule, column) in rules.iter().zip(columns.iter_mut()) {
                let value = slots[rule.slot]
                    .take()
                    .or_else(|| rule.default.clone())
                    .ok_or_else(defer)?;
                if !rule.push(value, column, strings) {
                    return Err(defer());
                }
            }
            slots.iter_mut().for_each(|s| *s = None); // fields of other kinds
            n += 1;
        }
        let (kind, columns) = part.unwrap_or((0, Vec::new()));
        Ok(Part {
            kind,
            start: 0,
            n,
            columns: Joined::of_rows(&columns),
        })
    }
}

/// One row-wise sample, its known fields' values into `slots`.
struct Row<'s, 'de> {
    dec: &'s TelemetryDecoder,
    slots: &'s mut Vec<Option<Scalar<'de>>>,
}

impl<'de> DeserializeSeed<'de> for Row<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Row<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sample object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Text>()? {
            match self.dec.slots.get(key.0.as_ref()) {
                Some(&slot) => self.slots[slot] = Some(map.next_value()?), // twice: the last counts
                None => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(())
    }
}

/// The column batches, in order.
struct Batches<'s, 'de>(Ctx<'s, 'de>);

impl<'de> DeserializeSeed<'de> for Batches<'_, 'de> {
    type Value = Vec<Part>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Batches<'_, 'de> {
    type Value = Vec<Part>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of column batches")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let Ctx { dec, strings } = self.0;
        let mut out = Vec::new();
        // the rows left under the message's limit: a batch saying more is deferred before its columns are
        // made (each is made `n` long at once; a small message of many huge `n` must not allocate them all)
        let mut left = dec.max_rows;
        while let Some(part) = seq.next_element_seed(Batch(
            Ctx {
                dec,
                strings: &mut *strings,
            },
            left,
        ))? {
            if out.len() >= dec.max_batches {
                return Err(defer());
            }
            left -= part.n;
            out.push(part);
        }
        Ok(out)
    }
}

/// A batch, and the rows it may have (what the message's limit leaves after the batches before it).
struct Batch<'s, 'de>(Ctx<'s, 'de>, usize);

impl<'de> DeserializeSeed<'de> for Batch<'_, 'de> {
    type Value = Part;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Part, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Batch<'_, 'de> {
    type Value = Part;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a column batch")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Part, A::Error> {
        let Ctx { dec, strings } = self.0;
        let (mut kind, mut n, mut columns, mut raw) = (None, None, None, None::<&'de RawValue>);
        while let Some(key) = map.next_key::<Text>()? {
            match key.0.as_ref() {
                "kind" if kind.is_none() => {
                    kind = Some(
                        dec.kind_index(&map.next_value::<Text>()?.0)
                            .ok_or_else(defer)?,
                    );
                }
                "n" if n.is_none() => {
                    let count = usize::try_from(map.next_value::<u64>()?).map_err(|_| defer())?;
                    if count > self.1 {
                        return Err(defer());
                    }
                    n = Some(count);
                }
                "data" if columns.is_none() && raw.is_none() => match (kind, n) {
                    (Some(kind), Some(n)) => {
                        columns = Some(map.next_value_seed(Data {
                            dec,
                            kind,
                            n,
                            strings: &mut *strings,
                        })?);
                    }
                    _ => raw = Some(map.next_value()?), // read once kind and n are known
                },
                "kind" | "n" | "data" => return Err(defer()), // twice
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        let (Some(kind), Some(n)) = (kind, n) else {
            return Err(defer());
        };
        let columns = match (columns, raw) {
            (Some(columns), _) => columns,
            (None, Some(raw)) => {
                let mut later = serde_json::Deserializer::from_str(raw.get());
                Data {
                    dec,
                    kind,
                    n,
                    strings,
                }
                .deserialize(&mut later)
                .map_err(|_| defer())?
            }
            (None, None) => return Err(defer()),
        };
        Ok(Part {
            kind,
            start: 0,
            n,
            columns,
        })
    }
}

/// A batch's `data`: one column (or one repeated value) per field of its kind, defaults where absent.
struct Data<'s, 'de> {
    dec: &'s TelemetryDecoder,
    kind: usize,
    n: usize,
    strings: &'s mut Strings<'de>,
}

impl<'de> DeserializeSeed<'de> for Data<'_, 'de> {
    type Value = Joined;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Joined, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Data<'_, 'de> {
    type Value = Joined;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of columns")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Joined, A::Error> {
        let kind = &self.dec.kinds[self.kind];
        let mut out = Joined::zeroed(kind, self.n);
        let mut given = vec![false; kind.rules.len()];
        while let Some(key) = map.next_key::<Text>()? {
            match kind.index.get(key.0.as_ref()) {
                Some(&i) => {
                    // twice: the last counts (the first must be valid too, or the Python decoder decides)
                    let seed = ColumnSeed {
                        rule: &kind.rules[i],
                        n: self.n,
                        out: &mut out,
                        strings: &mut *self.strings,
                    };
                    map.next_value_seed(seed)?;
                    given[i] = true;
                }
                None => {
                    map.next_value::<Skip>()?; // a column the contract does not know
                }
            }
        }
        out.fill_defaults(kind, &given, self.n, self.strings)
            .ok_or_else(defer)?;
        Ok(out)
    }
}

/// One column of a batch, read into its rows of the part's buffers.
struct ColumnSeed<'s, 'de> {
    rule: &'s Rule,
    n: usize,
    out: &'s mut Joined,
    strings: &'s mut Strings<'de>,
}

impl<'de> DeserializeSeed<'de> for ColumnSeed<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if !matches!(self.rule.ty, Type::Number | Type::Integer) {
            return d.deserialize_any(self);
        }
        // a numeric column: its text (checked by serde_json), its numbers read without a visit per value
        let text = <&RawValue>::deserialize(d)?.get();
        if self
            .out
            .read_numbers(self.rule, self.n, text, self.strings)
            .is_some()
        {
            return Ok(());
        }
        let mut again = serde_json::Deserializer::from_str(text); // anything else: as before
        again.deserialize_any(self).map_err(|_| defer())
    }
}

impl<'de> ColumnSeed<'_, 'de> {
    /// One value standing for every row.
    fn one<E: de::Error>(self, value: Scalar<'de>) -> Result<(), E> {
        let cell = self
            .rule
            .check(value, None, self.strings, &mut Vec::new())
            .ok_or_else(defer)?;
        self.out.fill(self.rule, self.n, cell);
        Ok(())
    }
}

impl<'de> Visitor<'de> for ColumnSeed<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of n values or one value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (mut valid, mut last) = (Vec::new(), None);
        let mut count = 0;
        while let Some(value) = seq.next_element::<Scalar>()? {
            if count >= self.n {
                return Err(defer());
            }
            let cell = self
                .rule
                .check(value, last, self.strings, &mut valid)
                .ok_or_else(defer)?;
            if let Cell::Code(code) = cell {
                last = Some(code);
            }
            self.out.put(self.rule, self.n, count, cell);
            count += 1;
        }
        if count != self.n {
            return Err(defer());
        }
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.one(Scalar::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.one(Scalar::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.one(i64::try_from(v).map_or(Scalar::Big(v), Scalar::Int))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.one(Scalar::Float(v))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<(), E> {
        self.one(Scalar::Text(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.one(Scalar::Text(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<(), E> {
        self.one(Scalar::Text(Cow::Owned(v)))
    }
}

/// A field rule as `streams/contract/native_decode.py` hands it over: (name, type, default or None when
/// required, (minimum, maximum, exclusive minimum), (min length, max length), enumeration or None).
/// Bounds are floats for a number and integers for an integer.
type RuleSpec<'py> = (
    String,
    String,
    Option<Bound<'py, PyAny>>,
    (
        Option<Bound<'py, PyAny>>,
        Option<Bound<'py, PyAny>>,
        Option<Bound<'py, PyAny>>,
    ),
    (usize, Option<usize>),
    Option<Vec<String>>,
);

fn scalar(ty: Type, value: &Bound<'_, PyAny>) -> PyResult<Scalar<'static>> {
    Ok(match ty {
        Type::Number => Scalar::Float(value.extract()?),
        Type::Integer => Scalar::Int(value.extract()?),
        Type::Boolean => Scalar::Bool(value.extract()?),
        Type::Text => Scalar::Text(Cow::Owned(value.extract()?)),
    })
}

/// The decoder of telemetry envelopes under the rules it was made with.
#[pyclass(frozen, module = "driftlog_native")]
pub struct TelemetryDecoder {
    schema: String,
    max_rows: usize,
    max_batches: usize,
    max_seq: u64,
    kinds: Vec<Kind>,
    slots: FxMap<String, usize>, // every field name of any kind (and "kind") -> slot of a row-wise sample
    kind_slot: usize,
}

impl TelemetryDecoder {
    fn kind_index(&self, name: &str) -> Option<usize> {
        self.kinds.iter().position(|k| k.name == name)
    }

    fn valid_seq(&self, seq: Option<u64>) -> bool {
        seq.is_none_or(|s| s <= self.max_seq)
    }

    /// The message read by serde_json (the definition of this fast path: any message of any layout).
    fn parse<'de>(&self, text: &'de str, strings: &mut Strings<'de>) -> Option<Envelope<'de>> {
        let mut de = serde_json::Deserializer::from_str(text);
        let envelope = de.deserialize_map(Ctx { dec: self, strings }).ok()?;
        de.end().ok()?;
        Some(envelope)
    }
}

#[pymethods]
impl TelemetryDecoder {
    /// TelemetryDecoder(schema, max_rows, max_batches, max_seq, kinds, times): `kinds` as [(name, [rule spec])],
    /// each rule spec (name, type, default or None if required, bounds, lengths, enumeration or None);
    /// `times`: a kind's name -> its event-time field (a number field: each part's ends told with it).
    #[new]
    #[pyo3(signature = (schema, max_rows, max_batches, max_seq, kinds, times=HashMap::new()))]
    fn new(
        schema: String,
        max_rows: usize,
        max_batches: usize,
        max_seq: u64,
        kinds: Vec<(String, Vec<RuleSpec<'_>>)>,
        times: HashMap<String, String>,
    ) -> PyResult<Self> {
        let mut slots: FxMap<String, usize> = FxMap::default();
        slots.insert("kind".to_string(), 0);
        let mut out = Vec::new();
        for (name, specs) in kinds {
            let mut rules = Vec::new();
            let mut index = FxMap::default();
            let mut counts = [0; 4];
            for (field, ty, default, (min, max, above), (min_len, max_len), allowed) in specs {
                let ty = match ty.as_str() {
                    "number" => Type::Number,
                    "integer" => Type::Integer,
                    "string" => Type::Text,
                    "boolean" => Type::Boolean,
                    other => {
                        return Err(PyValueError::new_err(format!(
                            "{field}: type {other} is not a sample field's"
                        )))
                    }
                };
                let bounds = [min, max, above];
                let mut floats = [None; 3];
                let mut ints = [None; 3];
                for (i, bound) in bounds.iter().enumerate() {
                    if let Some(bound) = bound {
                        match ty {
                            Type::Number => floats[i] = Some(bound.extract()?),
                            Type::Integer => ints[i] = Some(bound.extract()?),
                            _ => {
                                return Err(PyValueError::new_err(format!(
                                    "{field}: bounds on a {ty:?}"
                                )))
                            }
                        }
                    }
                }
                let row = counts[ty.code()];
                counts[ty.code()] += 1;
                let next = slots.len();
                let slot = *slots.entry(field.clone()).or_insert(next);
                index.insert(field, rules.len());
                rules.push(Rule {
                    ty,
                    slot,
                    row,
                    default: default.map(|d| scalar(ty, &d)).transpose()?,
                    floats,
                    ints,
                    min_len,
                    max_len,
                    allowed,
                });
            }
            let time = times
                .get(&name)
                .and_then(|field| index.get(field))
                .map(|&i| &rules[i])
                .filter(|rule| rule.ty == Type::Number)
                .map(|rule| rule.row);
            out.push(Kind {
                name,
                rules,
                index,
                counts,
                time,
            });
        }
        Ok(Self {
            schema,
            max_rows,
            max_batches,
            max_seq,
            kinds: out,
            slots,
            kind_slot: 0,
        })
    }

    /// decode(raw) -> None, or (source, seq or None, total samples, strings, parts): each part (kind,
    /// first sample position, rows, (float64, int64, bool, uint32) buffers, event-time ends or None), each
    /// buffer the part's columns of that type one after the other in rule order, every one `rows` long (a
    /// value standing for every row written out `rows` times); uint32 values are codes into `strings`; the
    /// ends as `Kind::time_bounds` tells them. None: the Python decoder decides.
    fn decode<'py>(&self, py: Python<'py>, raw: &[u8]) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Ok(text) = std::str::from_utf8(raw) else {
            return Ok(None);
        };
        if memmem::find(raw, b"\\ud").is_some() || memmem::find(raw, b"\\uD").is_some() {
            return Ok(None); // lone surrogates are not text; only the Python decoder tells pairs from them
        }
        let negative_zero = !has_integer_minus_zero(text);
        let fresh = || Strings {
            negative_zero,
            ..Strings::default()
        };
        let mut strings = fresh();
        let read = || {
            columnar::read(self, text, &mut strings).or_else(|| {
                strings = fresh(); // as if the columnar reader had not been: strings numbered from 0 again
                self.parse(text, &mut strings)
            })
        };
        let Some(envelope) = py.detach(read) else {
            return Ok(None);
        };
        let list = PyList::new(py, strings.list.iter().map(|s| PyString::new(py, s)))?;
        let mut parts = Vec::with_capacity(envelope.parts.len());
        for part in envelope.parts {
            let kind = &self.kinds[part.kind];
            let ends = kind.time_bounds(&part.columns.floats, part.n);
            let Joined {
                floats,
                ints,
                bools,
                codes,
            } = part.columns;
            let buffers = (
                Buffer::new(Owned::F64(floats)),
                Buffer::new(Owned::I64(ints)),
                Buffer::new(Owned::U8(bools)),
                Buffer::new(Owned::U32(codes)),
            );
            parts.push((kind.name.as_str(), part.start, part.n, buffers, ends));
        }
        let out = (
            envelope.source.as_ref(),
            envelope.seq,
            envelope.total,
            list,
            parts,
        );
        Ok(Some(out.into_pyobject(py)?.into_any()))
    }
}

/// A part's columns joined by type, each `n` long, in rule order within their type: what numpy reads as
/// one 2-D array per type.
#[derive(Default)]
struct Joined {
    floats: Vec<f64>,
    ints: Vec<i64>,
    bools: Vec<u8>,
    codes: Vec<u32>,
}

impl Joined {
    /// `n` rows of every column of `kind`, zeros (from the allocator's zeroed pages: each written once).
    fn zeroed(kind: &Kind, n: usize) -> Self {
        let [floats, ints, bools, codes] = kind.counts.map(|count| count * n);
        Self {
            floats: vec![0.0; floats],
            ints: vec![0; ints],
            bools: vec![0; bools],
            codes: vec![0; codes],
        }
    }

    /// Row `at` of `rule`'s column (of `n` rows).
    fn put(&mut self, rule: &Rule, n: usize, at: usize, cell: Cell) {
        let at = rule.row * n + at;
        match cell {
            Cell::Float(v) => self.floats[at] = v,
            Cell::Int(v) => self.ints[at] = v,
            Cell::Bool(v) => self.bools[at] = v,
            Cell::Code(v) => self.codes[at] = v,
        }
    }

    /// Every row of `rule`'s column (of `n` rows).
    fn fill(&mut self, rule: &Rule, n: usize, cell: Cell) {
        let rows = rule.row * n..(rule.row + 1) * n;
        match cell {
            Cell::Float(v) => self.floats[rows].fill(v),
            Cell::Int(v) => self.ints[rows].fill(v),
            Cell::Bool(v) => self.bools[rows].fill(v),
            Cell::Code(v) => self.codes[rows].fill(v),
        }
    }

    /// The columns of `kind` not `given` in a batch: their defaults, for every row; None if one is required
    /// (or a default is outside its own rule: the Python decoder decides).
    fn fill_defaults<'a>(
        &mut self,
        kind: &Kind,
        given: &[bool],
        n: usize,
        strings: &mut Strings<'a>,
    ) -> Option<()> {
        for (rule, given) in kind.rules.iter().zip(given) {
            if !given {
                let cell = rule.check(rule.default.clone()?, None, strings, &mut Vec::new())?;
                self.fill(rule, n, cell);
            }
        }
        Some(())
    }

    /// A numeric column read from the JSON text it starts `text` straight into its rows: the length of its
    /// text; None when anything in it is not plainly a valid value of its field (then serde_json decides).
    fn read_numbers(
        &mut self,
        rule: &Rule,
        n: usize,
        text: &str,
        strings: &Strings,
    ) -> Option<usize> {
        let rows = rule.row * n..(rule.row + 1) * n;
        let text = text.as_bytes();
        match rule.ty {
            Type::Number => {
                let out = &mut self.floats[rows];
                numbers::each_number(text, n, true, numbers::float, |i, v| {
                    rule.float(v, strings).map(|v| out[i] = v).is_some()
                })
            }
            Type::Integer => {
                let out = &mut self.ints[rows];
                numbers::each_number(text, n, false, numbers::int, |i, v| {
                    rule.int(v).map(|v| out[i] = v).is_some()
                })
            }
            Type::Text | Type::Boolean => None,
        }
    }

    /// Row-wise samples' columns (in rule order, all of one length) joined.
    fn of_rows(columns: &[Values]) -> Self {
        let mut out = Self::default();
        for column in columns {
            match column {
                Values::Floats(v) => out.floats.extend_from_slice(v),
                Values::Ints(v) => out.ints.extend_from_slice(v),
                Values::Bools(v) => out.bools.extend_from_slice(v),
                Values::Codes(v, _) => out.codes.extend_from_slice(v),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fx_hashes_differ() {
        let mut a = Fx::default();
        a.write(b"op");
        let mut b = Fx::default();
        b.write(b"ok");
        assert_ne!(a.finish(), b.finish());
    }
}
