//! A small JSON reader for the event: the SDK's fast path.
//!
//! The event is parsed on every call, inside wasm, where every loop iteration also pays
//! the engine's budget check; serde_json's general machinery (a visitor per field, a key
//! comparison per struct field, a second pass for borrowed raw values) cost more than the
//! rest of a typical hook call put together. This reader does the one thing the event
//! needs: walk a known shape once, borrowing strings and keeping free-form parts as text
//! ([`RawJson`]). Strings are scanned eight bytes at a time.
//!
//! It validates what it reads: structure, string escapes and control characters, number
//! and literal syntax, and nesting (at most [`MAX_DEPTH`] levels, serde_json's own limit,
//! so nothing the engine sends is refused). Everything a [`RawJson`] holds is therefore
//! one well-formed JSON value, and the readers on it ([`field`], [`as_u64`], ...) can rely
//! on that. Your own types are still read with serde ([`as_type`]).

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;

/// How deep arrays and objects may nest (serde_json's default recursion limit).
pub const MAX_DEPTH: u32 = 128;

/// A JSON value, unparsed: its text, borrowed from the event. Always exactly one
/// well-formed JSON value (the event reader and [`RawJson::new`] check it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RawJson<'a>(&'a str);

impl<'a> RawJson<'a> {
    /// Checks that `text` is one JSON value (surrounding whitespace allowed) and wraps it.
    pub fn new(text: &'a str) -> Result<RawJson<'a>, Error> {
        let mut reader = Reader::new(text);
        let value = reader.raw()?;
        reader.end()?;
        Ok(value)
    }

    /// The value's JSON text.
    pub fn get(self) -> &'a str {
        self.0
    }

    /// Whether the value is `null`.
    pub fn is_null(self) -> bool {
        self.0 == "null"
    }
}

impl fmt::Debug for RawJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "RawJson({})", self.0)
    }
}

impl fmt::Display for RawJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Why a text is not the JSON expected: what, and at which byte.
///
/// Boxed, so a `Result<(), Error>` is one pointer wide: every step of the reader returns
/// one, and in wasm a wider one goes through memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(Box<Problem>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Problem {
    what: Cow<'static, str>,
    at: usize,
}

impl Error {
    #[cold]
    fn new(what: impl Into<Cow<'static, str>>, at: usize) -> Error {
        Error(Box::new(Problem {
            what: what.into(),
            at,
        }))
    }

    pub(crate) fn invalid_utf8(at: usize) -> Error {
        Error::new("invalid UTF-8", at)
    }

    pub(crate) fn missing(field: &'static str, within: &'static str, at: usize) -> Error {
        Error::new(format!("missing field `{field}` in {within}"), at)
    }

    pub(crate) fn unknown(what: &'static str, value: &str, at: usize) -> Error {
        Error::new(format!("unknown {what} `{value}`"), at)
    }

    /// The byte offset in the text where the problem was found.
    pub fn offset(&self) -> usize {
        self.0.at
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} at byte {}", self.0.what, self.0.at)
    }
}

impl std::error::Error for Error {}

// --- readers on raw values -------------------------------------------------------------

/// The value of `key` in the JSON object `object`, unparsed; `None` when `object` is not an
/// object or has no such key. Only the keys before it are read (their values are skipped);
/// the first occurrence of a repeated key wins. Escaped keys are compared unescaped.
pub fn field<'a>(object: RawJson<'a>, key: &str) -> Option<RawJson<'a>> {
    at_field(object, key)?.raw().ok()
}

/// [`field`] then [`as_str`], reading the string where it lies (one scan of it, not two).
pub(crate) fn field_str<'a>(object: RawJson<'a>, key: &str) -> Option<Cow<'a, str>> {
    let mut reader = at_field(object, key)?;
    if reader.peek() != Some(b'"') {
        return None;
    }
    reader.string().ok()
}

/// [`field`] then [`as_u64`], reading a plain whole number where it lies.
pub(crate) fn field_u64(object: RawJson<'_>, key: &str) -> Option<u64> {
    let mut reader = at_field(object, key)?;
    // Anything but plain digits (a fraction, an exponent, a sign, another type) the reader
    // leaves where it was, for `as_u64` to judge.
    match reader.u64() {
        Ok(whole) => Some(whole),
        Err(_) => as_u64(reader.raw().ok()?),
    }
}

/// A reader at the value of `key` in `object` (see [`field`]).
fn at_field<'a>(object: RawJson<'a>, key: &str) -> Option<Reader<'a>> {
    // The text is one well-formed value, so every step below succeeds on an object.
    let mut reader = Reader::new(object.0);
    if reader.peek() != Some(b'{') {
        return None;
    }
    reader.pos += 1;
    let mut first = true;
    while let Some(name) = reader.next_key(first).ok()? {
        if same(&name, key) {
            return Some(reader);
        }
        reader.skip().ok()?;
        first = false;
    }
    None
}

/// A JSON value as text: borrowed from the input unless it has escapes. `None` when it is
/// not a string.
pub fn as_str(value: RawJson<'_>) -> Option<Cow<'_, str>> {
    let mut reader = Reader::new(value.0);
    if reader.peek() != Some(b'"') {
        return None;
    }
    reader.string().ok()
}

/// A JSON value as a whole number: a non-negative integer, or a non-negative float
/// truncated. `None` otherwise.
pub fn as_u64(value: RawJson<'_>) -> Option<u64> {
    let text = value.0;
    if let Some(whole) = plain_u64(text) {
        return Some(whole);
    }
    match text.as_bytes().first() {
        Some(b'-' | b'0'..=b'9') => {}
        _ => return None,
    }
    let number: f64 = serde_json::from_str(text).ok()?;
    if number >= 0.0 {
        Some(number as u64)
    } else {
        None
    }
}

/// A JSON value as a number. `None` when it is not one.
pub fn as_f64(value: RawJson<'_>) -> Option<f64> {
    as_type(value)
}

/// A JSON value as any `Deserialize` type (read by serde_json). `None` when it does not fit.
pub fn as_type<'a, T: Deserialize<'a>>(value: RawJson<'a>) -> Option<T> {
    serde_json::from_str(value.0).ok()
}

/// Whether two texts are equal. Inline and word by word: in wasm builds, `==` on strings
/// calls a `memcmp` that compares byte by byte, and the event compares every key it reads.
#[inline(always)]
pub(crate) fn same(a: &str, b: &str) -> bool {
    same_bytes(a.as_bytes(), b.as_bytes())
}

/// [`same`] on bytes.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |bytes: &[u8], at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(word)
    };
    let mut at = 0;
    while at + 8 <= a.len() {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    a[at..].iter().zip(&b[at..]).all(|(x, y)| x == y)
}

/// Whether `text` has a character a JSON string must escape (a quote, a backslash, a
/// control character).
pub(crate) fn needs_escape(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        if string_stops(u64::from_le_bytes(word)) != 0 {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)
}

/// `text` as a u64 when it is a run of digits that fits; `None` otherwise (a sign, a
/// fraction, an exponent, too many digits).
fn plain_u64(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    if bytes.is_empty() || bytes.len() > 19 {
        return None;
    }
    let mut value: u64 = 0;
    for &byte in bytes {
        if !byte.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u64::from(byte - b'0');
    }
    Some(value)
}

// --- the reader ------------------------------------------------------------------------

/// Reads JSON from a text, front to back. Every method leaves the position after what it
/// read, skipping whitespace before it.
///
/// The small steps (`peek`, `expect`, `string`) are `#[inline(always)]`: the wasm builds
/// (Rust 1.63's LLVM) kept them out of line, and there a call costs more than the step;
/// inlined, the credit policy's call took about 8% less.
pub(crate) struct Reader<'a> {
    text: &'a str,
    pos: usize,
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The bytes of `word` (eight, little-endian) a string scan must stop at: quotes,
/// backslashes and control characters (below 0x20). The lowest set high bit marks the first
/// such byte exactly (bits above it may be false alarms, from borrows), so
/// `trailing_zeros() / 8` is its index; zero when there is none.
#[inline]
fn string_stops(word: u64) -> u64 {
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let quote = has_zero(word ^ (ONES * u64::from(b'"')));
    let backslash = has_zero(word ^ (ONES * u64::from(b'\\')));
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    quote | backslash | control
}

impl<'a> Reader<'a> {
    pub(crate) fn new(text: &'a str) -> Reader<'a> {
        Reader { text, pos: 0 }
    }

    /// Where the reader is, in bytes from the start of the text.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte after whitespace, not consumed.
    #[inline(always)]
    pub(crate) fn peek(&mut self) -> Option<u8> {
        let bytes = self.bytes();
        // The engine writes no whitespace: the first byte is the usual answer.
        match bytes.get(self.pos) {
            Some(&byte) if byte > b' ' => return Some(byte),
            None => return None,
            Some(_) => {}
        }
        let mut pos = self.pos;
        while let Some(&byte) = bytes.get(pos) {
            match byte {
                b' ' | b'\n' | b'\r' | b'\t' => pos += 1,
                _ => {
                    self.pos = pos;
                    return Some(byte);
                }
            }
        }
        self.pos = pos;
        None
    }

    #[inline(always)]
    fn expect(&mut self, wanted: u8, what: &'static str) -> Result<(), Error> {
        if self.peek() == Some(wanted) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.unexpected(what))
        }
    }

    fn unexpected(&self, what: &'static str) -> Error {
        match self.bytes().get(self.pos) {
            Some(_) => Error::new(format!("expected {what}"), self.pos),
            None => Error::new(format!("expected {what}, found the end"), self.pos),
        }
    }

    /// Only whitespace is left.
    pub(crate) fn end(&mut self) -> Result<(), Error> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(Error::new("trailing characters", self.pos)),
        }
    }

    /// Whether the next value is `null`; if so, it is consumed.
    pub(crate) fn null(&mut self) -> Result<bool, Error> {
        if self.peek() != Some(b'n') {
            return Ok(false);
        }
        self.literal("null")?;
        Ok(true)
    }

    fn literal(&mut self, word: &'static str) -> Result<(), Error> {
        let end = self.pos + word.len();
        if self.bytes().get(self.pos..end) == Some(word.as_bytes()) {
            self.pos = end;
            Ok(())
        } else {
            Err(Error::new("expected a JSON value", self.pos))
        }
    }

    /// Reads the `{` that opens an object (then [`Reader::entry`] and [`Reader::key_text`]
    /// or [`Reader::eat`] walk its keys).
    #[inline(always)]
    pub(crate) fn expect_object(&mut self) -> Result<(), Error> {
        self.expect(b'{', "`{`")
    }

    /// Inside an object (after its `{`, or after the value of its previous key when not
    /// `first`): reads the next key and its colon, leaving the reader at the value; `None`
    /// when the object ends here (its `}` read).
    #[inline(always)]
    fn next_key(&mut self, first: bool) -> Result<Option<Cow<'a, str>>, Error> {
        if !self.entry(first)? {
            return Ok(None);
        }
        self.key_text().map(Some)
    }

    /// Inside an object (as [`Reader::next_key`]): moves past the `,` before the next key
    /// and answers whether there is one; at the object's end, moves past its `}` and
    /// answers `false`.
    #[inline(always)]
    pub(crate) fn entry(&mut self, first: bool) -> Result<bool, Error> {
        match self.peek() {
            Some(b'}') => {
                self.pos += 1;
                Ok(false)
            }
            Some(b',') if !first => {
                self.pos += 1;
                Ok(true)
            }
            _ if first => Ok(true),
            _ => Err(self.unexpected("`,` or `}`")),
        }
    }

    /// Reads a key and its colon, leaving the reader at the value.
    #[inline(always)]
    pub(crate) fn key_text(&mut self) -> Result<Cow<'a, str>, Error> {
        if self.peek() != Some(b'"') {
            return Err(self.unexpected("a key"));
        }
        let key = self.string()?;
        self.expect(b':', "`:`")?;
        Ok(key)
    }

    /// Whether the text at the position is exactly `key` (a key as the engine writes it:
    /// `"name":`); if so, moves past it. A constant `key` makes this a few word compares.
    #[inline(always)]
    pub(crate) fn eat(&mut self, key: &'static str) -> bool {
        match self.bytes().get(self.pos..self.pos + key.len()) {
            Some(bytes) if same_bytes(bytes, key.as_bytes()) => {
                self.pos += key.len();
                true
            }
            _ => false,
        }
    }

    /// Reads an array, calling `each` with the reader at each element; `each` must read it.
    pub(crate) fn array<F>(&mut self, mut each: F) -> Result<(), Error>
    where
        F: FnMut(&mut Reader<'a>) -> Result<(), Error>,
    {
        self.expect(b'[', "`[`")?;
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            each(self)?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.unexpected("`,` or `]`")),
            }
        }
    }

    /// Reads a string: borrowed from the text unless it has escapes.
    #[inline(always)]
    pub(crate) fn string(&mut self) -> Result<Cow<'a, str>, Error> {
        self.expect(b'"', "a string")?;
        let start = self.pos;
        if self.scan_string()? {
            return self.unescape(start);
        }
        Ok(Cow::Borrowed(&self.text[start..self.pos - 1]))
    }

    /// The string that starts at `start` (after its quote) and ends before the position,
    /// unescaped. Rare, so out of line; serde_json unescapes (and refuses lone surrogates).
    #[cold]
    #[inline(never)]
    fn unescape(&self, start: usize) -> Result<Cow<'a, str>, Error> {
        serde_json::from_str::<String>(&self.text[start - 1..self.pos])
            .map(Cow::Owned)
            .map_err(|error| Error::new(format!("bad string escape ({error})"), start))
    }

    /// Scans past the closing quote of a string whose opening quote was consumed; returns
    /// whether it has escapes. Checks escapes and refuses control characters.
    #[inline(always)]
    fn scan_string(&mut self) -> Result<bool, Error> {
        let bytes = self.bytes();
        // The position lives in a local while scanning (stores through `self` in the loop
        // would each be a memory write in wasm).
        let mut pos = self.pos;
        // Eight bytes at a time, straight to the first byte that needs a look.
        while let Some(chunk) = bytes.get(pos..pos + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let stops = string_stops(u64::from_le_bytes(word));
            if stops != 0 {
                pos += (stops.trailing_zeros() / 8) as usize;
                if bytes[pos] == b'"' {
                    self.pos = pos + 1;
                    return Ok(false);
                }
                break;
            }
            pos += 8;
        }
        // An escape, a control character, or the last few bytes of the text.
        self.pos = pos;
        self.scan_escaped_string()
    }

    /// The rest of [`Reader::scan_string`] from a backslash, a control character or the
    /// last few bytes of the text: rare, so out of line.
    #[inline(never)]
    fn scan_escaped_string(&mut self) -> Result<bool, Error> {
        let bytes = self.bytes();
        let mut escaped = false;
        loop {
            match bytes.get(self.pos) {
                None => return Err(Error::new("unterminated string", self.pos)),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(escaped);
                }
                Some(b'\\') => {
                    escaped = true;
                    self.escape()?;
                }
                Some(&byte) if byte < 0x20 => {
                    return Err(Error::new("control character in a string", self.pos));
                }
                Some(_) => self.pos += 1,
            }
        }
    }

    /// Checks one escape at the position (the backslash) and moves past it.
    fn escape(&mut self) -> Result<(), Error> {
        let bytes = self.bytes();
        match bytes.get(self.pos + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.pos += 2;
                Ok(())
            }
            Some(b'u') => {
                let hex = bytes.get(self.pos + 2..self.pos + 6);
                if hex.map_or(false, |hex| hex.iter().all(u8::is_ascii_hexdigit)) {
                    self.pos += 6;
                    Ok(())
                } else {
                    Err(Error::new("bad \\u escape", self.pos))
                }
            }
            _ => Err(Error::new("bad string escape", self.pos)),
        }
    }

    /// Reads a non-negative integer: digits (no leading zero) that fit a u64, not followed by
    /// a fraction or an exponent. One pass, value and checks together: in wasm each extra
    /// walk or slice comparison (a `memcmp` call) cost more than the digits.
    pub(crate) fn u64(&mut self) -> Result<u64, Error> {
        self.peek();
        let bytes = self.bytes();
        let start = self.pos;
        let mut pos = start;
        let mut value: u64 = 0;
        while let Some(&byte) = bytes.get(pos) {
            let digit = byte.wrapping_sub(b'0');
            if digit > 9 {
                break;
            }
            // Wraps only past 19 digits, which are read again below (checked arithmetic on
            // u64 is a 128-bit multiplication in wasm).
            value = value.wrapping_mul(10).wrapping_add(u64::from(digit));
            pos += 1;
        }
        let digits = pos - start;
        let leading_zero = digits > 1 && bytes[start] == b'0';
        let fraction_or_exponent = matches!(bytes.get(pos), Some(b'.' | b'e' | b'E'));
        let value = match digits {
            1..=19 => Some(value),
            _ => self.text[start..pos].parse().ok(),
        };
        match value {
            Some(value) if !leading_zero && !fraction_or_exponent => {
                self.pos = pos;
                Ok(value)
            }
            _ => Err(Error::new("expected a whole number", start)),
        }
    }

    /// Reads a non-negative integer that fits a u32.
    pub(crate) fn u32(&mut self) -> Result<u32, Error> {
        self.peek();
        let start = self.pos;
        u32::try_from(self.u64()?).map_err(|_| Error::new("number out of range", start))
    }

    /// Reads `null` (as `None`) or what `read` reads.
    #[inline]
    pub(crate) fn optional<T, F>(&mut self, read: F) -> Result<Option<T>, Error>
    where
        F: FnOnce(&mut Reader<'a>) -> Result<T, Error>,
    {
        if self.null()? {
            Ok(None)
        } else {
            read(self).map(Some)
        }
    }

    /// Reads `null` (as `None`) or a non-negative integer.
    pub(crate) fn optional_u64(&mut self) -> Result<Option<u64>, Error> {
        self.optional(Reader::u64)
    }

    /// Reads `null` (as `None`) or a string.
    pub(crate) fn optional_string(&mut self) -> Result<Option<Cow<'a, str>>, Error> {
        self.optional(Reader::string)
    }

    /// Reads an array, each element with `read`.
    pub(crate) fn list<T, F>(&mut self, mut read: F) -> Result<Vec<T>, Error>
    where
        F: FnMut(&mut Reader<'a>) -> Result<T, Error>,
    {
        let mut out = Vec::new();
        self.array(|reader| {
            out.push(read(reader)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Reads an array of strings.
    pub(crate) fn strings(&mut self) -> Result<Vec<Cow<'a, str>>, Error> {
        self.list(Reader::string)
    }

    /// Reads any value and returns its text.
    pub(crate) fn raw(&mut self) -> Result<RawJson<'a>, Error> {
        self.peek();
        let start = self.pos;
        self.skip()?;
        Ok(RawJson(&self.text[start..self.pos]))
    }

    /// Reads `null` (as `None`) or any value's text.
    pub(crate) fn optional_raw(&mut self) -> Result<Option<RawJson<'a>>, Error> {
        self.optional(Reader::raw)
    }

    /// Reads past any value, checking it. Iterative: nesting is tracked in a bit stack (one
    /// bit per level: set for an object), so hostile nesting cannot exhaust the wasm stack.
    pub(crate) fn skip(&mut self) -> Result<(), Error> {
        let mut objects: u128 = 0;
        let mut depth: u32 = 0;
        loop {
            // A value.
            match self.peek() {
                Some(b'{') | Some(b'[') => {
                    let object = self.bytes()[self.pos] == b'{';
                    self.pos += 1;
                    let close = if object { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.pos += 1;
                    } else {
                        if depth == MAX_DEPTH {
                            return Err(Error::new("nested too deeply", self.pos));
                        }
                        objects = (objects << 1) | u128::from(object);
                        depth += 1;
                        if object {
                            self.key()?;
                        }
                        continue;
                    }
                }
                Some(b'"') => {
                    self.pos += 1;
                    self.scan_string()?;
                }
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal("true")?,
                Some(b'f') => self.literal("false")?,
                Some(b'n') => self.literal("null")?,
                _ => return Err(self.unexpected("a JSON value")),
            }
            // After a value: close what ends here, or go on to the next element.
            loop {
                if depth == 0 {
                    return Ok(());
                }
                let in_object = objects & 1 == 1;
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        if in_object {
                            self.key()?;
                        }
                        break;
                    }
                    Some(b'}') if in_object => {}
                    Some(b']') if !in_object => {}
                    _ if in_object => return Err(self.unexpected("`,` or `}`")),
                    _ => return Err(self.unexpected("`,` or `]`")),
                }
                self.pos += 1;
                objects >>= 1;
                depth -= 1;
            }
        }
    }

    /// Reads past an object key and its colon.
    fn key(&mut self) -> Result<(), Error> {
        if self.peek() != Some(b'"') {
            return Err(self.unexpected("a key"));
        }
        self.pos += 1;
        self.scan_string()?;
        self.expect(b':', "`:`")
    }

    /// Reads past a number, checking its syntax.
    fn number(&mut self) -> Result<(), Error> {
        let bytes = self.bytes();
        let start = self.pos;
        let digits = |pos: &mut usize| {
            let from = *pos;
            while bytes.get(*pos).map_or(false, u8::is_ascii_digit) {
                *pos += 1;
            }
            *pos - from
        };
        let mut pos = self.pos;
        if bytes.get(pos) == Some(&b'-') {
            pos += 1;
        }
        let whole = digits(&mut pos);
        let valid_whole = whole == 1 || (whole > 1 && bytes[pos - whole] != b'0');
        let mut valid = valid_whole;
        if bytes.get(pos) == Some(&b'.') {
            pos += 1;
            valid &= digits(&mut pos) > 0;
        }
        if matches!(bytes.get(pos), Some(b'e' | b'E')) {
            pos += 1;
            if matches!(bytes.get(pos), Some(b'+' | b'-')) {
                pos += 1;
            }
            valid &= digits(&mut pos) > 0;
        }
        if !valid {
            return Err(Error::new("bad number", start));
        }
        self.pos = pos;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skip_all(text: &str) -> Result<(), Error> {
        RawJson::new(text).map(|_| ())
    }

    #[test]
    fn well_formed_values_are_read_whole() {
        for text in [
            "null",
            "true",
            " false ",
            "0",
            "-0.5e+3",
            "12.25E-2",
            r#""plain""#,
            r#""a \"quoted\" \\ \/ \b\f\n\r\t \u00e9 word""#,
            "\"long strings are scanned eight bytes at a time, then byte by byte\"",
            r#"{"a": [1, {"b": []}, {}], "c": {"d": "e"}}"#,
            "[[[[]]], [[{}]]]",
            "\"caf\u{e9} \u{1f600}\"",
        ] {
            let raw = RawJson::new(text).unwrap_or_else(|error| panic!("{text}: {error}"));
            assert_eq!(raw.get(), text.trim());
        }
    }

    #[test]
    fn malformed_values_are_refused_with_where() {
        for (text, what) in [
            ("", "expected a JSON value, found the end"),
            ("[1, 2", "expected `,` or `]`, found the end"),
            ("[1 2]", "expected `,` or `]`"),
            ("{\"a\" 1}", "expected `:`"),
            ("{\"a\": 1,}", "expected a key"),
            ("{\"a\": 1]", "expected `,` or `}`"),
            ("[1}", "expected `,` or `]`"),
            ("{1: 2}", "expected a key"),
            ("\"open", "unterminated string"),
            ("\"tab\tin it\"", "control character in a string"),
            ("\"bad \\x escape\"", "bad string escape"),
            ("\"bad \\u12g4\"", "bad \\u escape"),
            ("01", "bad number"),
            ("-", "bad number"),
            ("1.", "bad number"),
            ("1e", "bad number"),
            ("tru", "expected a JSON value"),
            ("nul", "expected a JSON value"),
            ("1 2", "trailing characters"),
        ] {
            let error = skip_all(text).expect_err(text);
            assert!(
                error.to_string().starts_with(what),
                "{text:?}: {error} (wanted {what})"
            );
        }
    }

    #[test]
    fn nesting_is_limited_without_recursion() {
        let deep = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        assert!(skip_all(&deep(MAX_DEPTH as usize)).is_ok());
        // Far deeper than any stack would take if the walk recursed.
        let error = skip_all(&deep(100_000)).expect_err("too deep");
        assert!(
            error.to_string().starts_with("nested too deeply"),
            "{error}"
        );
    }

    #[test]
    fn the_string_scan_finds_stops_in_every_position_of_a_word() {
        for at in 0..20 {
            let mut text = format!("\"{}", "x".repeat(at));
            text.push_str("\\n\"");
            let value = as_str(RawJson::new(&text).expect("json")).expect("string");
            assert_eq!(value.len(), at + 1, "escape at {at}");
            assert!(matches!(value, Cow::Owned(_)));
            let mut bad = format!("\"{}", "x".repeat(at));
            bad.push('\u{1}');
            bad.push('"');
            assert!(RawJson::new(&bad).is_err(), "control character at {at}");
        }
    }

    #[test]
    fn the_first_stop_in_a_word_is_found_exactly() {
        // After each stop byte, the byte that would take a borrow from it (and so raise a
        // false alarm above it): a false alarm must never come first.
        for (stop, after) in [(b'"', b'#'), (b'\\', b']'), (0x01, b' '), (0x00, 0x01)] {
            for at in 0..8 {
                let mut word = [b'a'; 8];
                word[at] = stop;
                if at + 1 < 8 {
                    word[at + 1] = after;
                }
                let stops = string_stops(u64::from_le_bytes(word));
                assert_eq!(stops.trailing_zeros() / 8, at as u32, "{stop:#x} at {at}");
            }
        }
        assert_eq!(string_stops(u64::from_le_bytes(*b"plain \xe9t")), 0);
        assert_eq!(string_stops(u64::from_le_bytes(*b"no stops")), 0);
    }

    #[test]
    fn fields_are_found_without_reading_further() {
        let object =
            RawJson::new(r#"{"a": {"b": 1}, "b": 2, "esc\u0061ped": 3, "b": 4}"#).expect("json");
        assert_eq!(field(object, "b").map(RawJson::get), Some("2"));
        assert_eq!(field(object, "escaped").and_then(as_u64), Some(3));
        assert!(field(object, "c").is_none());
        let list = RawJson::new("[{\"b\": 1}]").expect("json");
        assert!(field(list, "b").is_none());
    }

    #[test]
    fn numbers_read_as_whole_numbers() {
        let number = |text| as_u64(RawJson::new(text).expect("json"));
        assert_eq!(number("0"), Some(0));
        assert_eq!(number("18446744073709551615"), Some(u64::MAX));
        assert_eq!(number("12.9"), Some(12));
        assert_eq!(number("1e3"), Some(1000));
        assert_eq!(number("-4"), None);
        assert_eq!(number("\"4\""), None);
        let mut reader = Reader::new(" 42,");
        assert_eq!(reader.u64(), Ok(42));
        for text in ["-1", "1.5", "01", "1e2", "x", "18446744073709551616"] {
            assert!(Reader::new(text).u64().is_err(), "{text}");
        }
    }
}
