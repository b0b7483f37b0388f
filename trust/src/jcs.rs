//! The JSON Canonicalization Scheme (RFC 8785): one byte sequence per JSON value, so a
//! signature over it verifies wherever the value is re-serialized. Three rules differ from
//! serde_json's compact output, and are written here:
//!
//! - **Numbers** are IEEE-754 doubles printed as ECMAScript's `Number.prototype.toString`
//!   prints them (RFC 8785 §3.2.2.3): the shortest digits that round-trip, plain from 1e-6 up
//!   to 1e21, else exponential with a signed exponent (`1e+30`, `1e-7`); `-0` is `0`. An
//!   integer beyond 2^53 is the double nearest to it, as every JCS implementation reads it.
//! - **Object keys** are sorted by their UTF-16 code units (§3.2.3), not by code points: a
//!   key with a character above U+FFFF (a surrogate pair) sorts before one in U+E000–U+FFFF.
//! - **Strings** are escaped as `JSON.stringify` escapes them, which is serde_json's escaping
//!   (`\b \f \n \r \t \" \\`, other controls as lowercase `\u00xx`, everything else as is).

use std::fmt::Write as _;

use serde_json::Value;

/// `value` in its RFC 8785 canonical form.
pub fn canonicalize(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => match number.as_i64() {
            // An integer a double holds exactly is written as it is: the common case (seqs,
            // times), without the digit shuffling below.
            Some(integer) if integer.unsigned_abs() <= EXACT_INTEGERS => {
                let _ = write!(out, "{integer}");
            }
            // Every JSON number serde_json holds is finite: `as_f64` is `Some`.
            _ => write_number(out, number.as_f64().unwrap_or(0.0)),
        },
        Value::String(text) => write_string(out, text),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(fields) => {
            let mut entries: Vec<(&String, &Value)> = fields.iter().collect();
            // Below U+D800 (every key Colloquy writes), UTF-8 byte order is UTF-16 order.
            if entries
                .iter()
                .all(|(key, _)| key.chars().all(|c| c <= '\u{d7ff}'))
            {
                entries.sort_unstable_by_key(|(key, _)| *key);
            } else {
                entries.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            }
            out.push('{');
            for (index, (key, value)) in entries.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, value);
            }
            out.push('}');
        }
    }
}

/// The largest integer every smaller one of which a double holds exactly (2^53).
const EXACT_INTEGERS: u64 = 1 << 53;

/// `text` quoted and escaped as `JSON.stringify` escapes it (RFC 8785 §3.2.2.2). Runs of
/// characters that need no escape (nearly all text) are copied whole.
fn write_string(out: &mut String, text: &str) {
    out.push('"');
    let mut plain = 0;
    for (at, byte) in text.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x0c => "\\f",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..0x20 => "",
            _ => continue,
        };
        // Every byte matched above is ASCII, so `at` is a character boundary.
        out.push_str(&text[plain..at]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{byte:04x}");
        } else {
            out.push_str(escape);
        }
        plain = at + 1;
    }
    out.push_str(&text[plain..]);
    out.push('"');
}

/// `number` as ECMAScript's `Number.prototype.toString` writes it (ECMA-262, 7.1.12.1).
fn write_number(out: &mut String, number: f64) {
    if number == 0.0 {
        out.push('0');
        return;
    }
    if number < 0.0 {
        out.push('-');
    }
    // The shortest digits that round-trip, the closest to the exact value, ties to even:
    // ECMAScript's choice (Rust's own `{:e}` breaks a tie upwards, as in 1424953923781206.2).
    let (digits, n) = shortest_digits(number.abs());
    let k = i32::try_from(digits.len()).expect("at most 17 digits");
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        let (whole, fraction) = digits.split_at(n as usize);
        let _ = write!(out, "{whole}.{fraction}");
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            let _ = write!(out, ".{rest}");
        }
        let sign = if n - 1 < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{}", (n - 1).abs());
    }
}

/// The significant digits `D` (no leading or trailing zeros) and exponent `n` with
/// `value = 0.D × 10^n`, read from ryu's shortest form of a positive finite `value`
/// (`123.0`, `0.002`, `1e30`, `1.5e-7`, …).
fn shortest_digits(value: f64) -> (String, i32) {
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(value);
    let (mantissa, exponent) = match text.split_once('e') {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i32>().unwrap_or(0)),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all = format!("{whole}{fraction}");
    let significant = all.trim_start_matches('0');
    let leading = all.len() - significant.len();
    let width = |text: &str| i32::try_from(text.len()).expect("a short number");
    let n = width(&all) - width(&all[..leading]) + exponent - width(fraction);
    (significant.trim_end_matches('0').to_owned(), n)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn number(value: f64) -> String {
        let mut out = String::new();
        write_number(&mut out, value);
        out
    }

    /// RFC 8785 §3.2.2.3's table and Appendix B's samples (IEEE-754 bit patterns and their
    /// expected strings), and ECMAScript's thresholds on either side.
    #[test]
    fn numbers_are_written_as_ecmascript_writes_them() {
        let cases: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, expected) in cases {
            assert_eq!(number(f64::from_bits(*bits)), *expected, "{bits:#018x}");
        }
        assert_eq!(number(4.5), "4.5");
        assert_eq!(number(0.002), "0.002");
        assert_eq!(number(1e-7), "1e-7");
        assert_eq!(number(1e30), "1e+30");
        assert_eq!(number(99.5), "99.5");
        assert_eq!(number(-1.5e-9), "-1.5e-9");
        assert_eq!(number(123456789.0), "123456789");
    }

    /// RFC 8785 §3.2.3's sorting example: keys by UTF-16 code units.
    #[test]
    fn keys_are_sorted_by_utf16_code_units() {
        let value = json!({
            "\u{20ac}": "Euro Sign",
            "\r": "Carriage Return",
            "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\u{1f600}": "Emoji: Grinning Face",
            "\u{80}": "Control",
            "\u{f6}": "Latin Small Letter O With Diaeresis",
        });
        let keys: Vec<String> = {
            let canonical = canonicalize(&value);
            let parsed: serde_json::Map<String, Value> =
                serde_json::from_str(&canonical).expect("JSON");
            // The canonical text's order, read back without re-sorting.
            let mut positions: Vec<(usize, String)> = parsed
                .keys()
                .map(|key| {
                    (
                        canonical.find(&format!("{}:", json!(key))).expect("key"),
                        key.clone(),
                    )
                })
                .collect();
            positions.sort();
            positions.into_iter().map(|(_, key)| key).collect()
        };
        assert_eq!(
            keys,
            [
                "\r",
                "1",
                "\u{80}",
                "\u{f6}",
                "\u{20ac}",
                "\u{1f600}",
                "\u{fb33}"
            ]
        );
    }

    /// RFC 8785 §3.2.2's sample: literals, numbers and string escapes.
    #[test]
    fn the_rfcs_sample_canonicalizes_to_its_text() {
        let value = json!({
            "numbers": [333333333.333_333_3_f64, 1e30, 4.5, 2e-3, 1e-27],
            "string": "\u{20ac}$\u{f}\nA'B\"\\\\\"/",
            "literals": [null, true, false],
        });
        assert_eq!(
            canonicalize(&value),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn strings_are_escaped_as_json_stringify_escapes_them_and_integers_written_whole() {
        assert_eq!(
            canonicalize(&json!("\u{1}\u{8}\u{c}\n\r\t\"\\/é\u{7f}")),
            "\"\\u0001\\b\\f\\n\\r\\t\\\"\\\\/é\u{7f}\""
        );
        assert_eq!(
            canonicalize(&json!([0, -7, 9007199254740992_u64])),
            "[0,-7,9007199254740992]"
        );
        // Past 2^53 an integer is the double nearest to it.
        assert_eq!(
            canonicalize(&json!(9007199254740993_u64)),
            "9007199254740992"
        );
        assert_eq!(canonicalize(&json!(u64::MAX)), "18446744073709552000");
    }
}
