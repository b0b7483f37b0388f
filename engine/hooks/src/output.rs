//! Reads a hook's answer (the output JSON of ABI v1) into a [`HookOutput`].
//!
//! Most answers are one of a few shapes, written compactly by the guest SDK (or by hand in
//! the same form): `{}`, or `{"actions":[...]}` holding `"continue"`, `reject` with a
//! reason, or `set_vars` with plain values. serde_json's derive reader took about 0.4 µs
//! for `{"actions":[{"set_vars":{"risk_route":"standard"}}]}` (system allocator), an eighth
//! of the credit policy's whole call; with [`usual`] reading it instead, the call is about
//! 5% shorter (the answer's map and strings still have to be built). Anything it does not
//! recognise exactly (another action, `log`, whitespace, escapes, negative or fractional
//! numbers, deep nesting) goes to serde_json, which also words every error.

use colloquy_protocol::action::{Action, RejectAction};
use colloquy_protocol::hook::HookOutput;
use serde_json::{Map, Number, Value};

use super::HookFailure;

/// How deep [`usual`] follows nested values in `set_vars` before leaving them to serde_json.
const MAX_USUAL_DEPTH: u32 = 16;

/// Reads an answer; a bad one is a [`HookFailure::BadOutput`] saying what and where.
pub fn parse(bytes: &[u8]) -> Result<HookOutput, HookFailure> {
    // "Carry on", the most common answer, without a parser.
    if bytes == b"{}" {
        return Ok(HookOutput::default());
    }
    if let Some(output) = usual(bytes) {
        return Ok(output);
    }
    serde_json::from_slice(bytes).map_err(|error| {
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(80)]).into_owned();
        HookFailure::BadOutput(format!("{error} (output starts with {shown:?})"))
    })
}

/// The answer when it has one of the usual shapes, exactly as serde_json would read it;
/// `None` for anything else.
fn usual(bytes: &[u8]) -> Option<HookOutput> {
    let mut cursor = Cursor { bytes, pos: 0 };
    cursor.eat(b"{\"actions\":[")?;
    let mut actions = Vec::new();
    loop {
        actions.push(cursor.action()?);
        if cursor.eat(b",").is_none() {
            break;
        }
    }
    cursor.eat(b"]}")?;
    (cursor.pos == bytes.len()).then_some(HookOutput {
        actions,
        log: Vec::new(),
    })
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    /// Moves past `text` if it comes next.
    fn eat(&mut self, text: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(text.len())?;
        (self.bytes.get(self.pos..end)? == text).then(|| self.pos = end)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn action(&mut self) -> Option<Action> {
        if self.eat(b"\"continue\"").is_some() {
            return Some(Action::Continue);
        }
        if self.eat(b"{\"reject\":{\"reason\":").is_some() {
            let reason = self.string()?;
            self.eat(b"}}")?;
            return Some(Action::Reject(RejectAction { reason }));
        }
        self.eat(b"{\"set_vars\":")?;
        let vars = self.object(0)?;
        self.eat(b"}")?;
        Some(Action::SetVars(vars))
    }

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<String> {
        self.eat(b"\"")?;
        let rest = self.bytes.get(self.pos..)?;
        let len = rest
            .iter()
            .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        let text = std::str::from_utf8(&rest[..len]).ok()?;
        self.pos += len + 1;
        Some(text.to_owned())
    }

    fn object(&mut self, depth: u32) -> Option<Map<String, Value>> {
        self.eat(b"{")?;
        let mut map = Map::new();
        if self.eat(b"}").is_some() {
            return Some(map);
        }
        loop {
            let key = self.string()?;
            self.eat(b":")?;
            let value = self.value(depth + 1)?;
            // A repeated key: the last one wins, as in serde_json's map.
            map.insert(key, value);
            if self.eat(b",").is_none() {
                break;
            }
        }
        self.eat(b"}")?;
        Some(map)
    }

    fn value(&mut self, depth: u32) -> Option<Value> {
        if depth > MAX_USUAL_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(Value::String),
            b'{' => self.object(depth).map(Value::Object),
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                if self.eat(b"]").is_none() {
                    loop {
                        items.push(self.value(depth + 1)?);
                        if self.eat(b",").is_none() {
                            break;
                        }
                    }
                    self.eat(b"]")?;
                }
                Some(Value::Array(items))
            }
            b't' => self.eat(b"true").map(|()| Value::Bool(true)),
            b'f' => self.eat(b"false").map(|()| Value::Bool(false)),
            b'n' => self.eat(b"null").map(|()| Value::Null),
            b'0'..=b'9' => self.whole_number().map(|n| Value::Number(Number::from(n))),
            _ => None,
        }
    }

    /// A non-negative integer that fits a u64, without a leading zero, fraction or exponent.
    fn whole_number(&mut self) -> Option<u64> {
        let rest = self.bytes.get(self.pos..)?;
        let len = rest
            .iter()
            .position(|byte| !byte.is_ascii_digit())
            .unwrap_or(rest.len());
        let digits = &rest[..len];
        if (digits.len() > 1 && digits[0] == b'0')
            || matches!(rest.get(len), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        let n = std::str::from_utf8(digits).ok()?.parse().ok()?;
        self.pos += len;
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_json reads, when it reads anything.
    fn serde(text: &str) -> Option<HookOutput> {
        serde_json::from_str(text).ok()
    }

    #[test]
    fn usual_answers_read_as_serde_reads_them() {
        for text in [
            r#"{"actions":[{"set_vars":{"risk_route":"standard"}}]}"#,
            r#"{"actions":["continue"]}"#,
            r#"{"actions":[{"reject":{"reason":"amount 500 exceeds the limit of 100"}}]}"#,
            r#"{"actions":[{"set_vars":{}},"continue",{"reject":{"reason":""}}]}"#,
            r#"{"actions":[{"set_vars":{"a":1,"b":[true,false,null,[]],"c":{"d":{"e":"é😀"}}}}]}"#,
            r#"{"actions":[{"set_vars":{"n":0,"big":18446744073709551615,"a":1,"a":2}}]}"#,
        ] {
            let fast = usual(text.as_bytes()).unwrap_or_else(|| panic!("not usual: {text}"));
            assert_eq!(Some(&fast), serde(text).as_ref(), "{text}");
        }
    }

    #[test]
    fn anything_else_is_left_to_serde() {
        for text in [
            r#"{"actions":[]}"#,
            r#"{"log":["x"]}"#,
            r#"{"actions":["continue"],"log":["x"]}"#,
            r#"{ "actions":["continue"]}"#,
            r#"{"actions":[{"set_vars":{"a":-1}}]}"#,
            r#"{"actions":[{"set_vars":{"a":1.5}}]}"#,
            r#"{"actions":[{"set_vars":{"a":1e3}}]}"#,
            r#"{"actions":[{"set_vars":{"a":01}}]}"#,
            r#"{"actions":[{"set_vars":{"a":18446744073709551616}}]}"#,
            r#"{"actions":[{"set_vars":{"a\u0062":"c"}}]}"#,
            r#"{"actions":[{"set_vars":{"a":"tab\there"}}]}"#,
            r#"{"actions":[{"reject":{"reason":"x","extra":1}}]}"#,
            r#"{"actions":[{"route":{"to":["x"]}}]}"#,
            r#"{"actions":["continue"]} "#,
            r#"{"actions":["continue"]}x"#,
            r#"{"actions":["continue",]}"#,
            r#"{"actions":[{"set_vars":{"a":1,}}]}"#,
            r#"{"actions":[{"set_vars":{"a":truex}}]}"#,
            r#"{"actions":[{"set_vars":"not a map"}]}"#,
        ] {
            assert!(usual(text.as_bytes()).is_none(), "{text}");
        }
        let deep = format!(
            r#"{{"actions":[{{"set_vars":{{"a":{}1{}}}}}]}}"#,
            "[".repeat(40),
            "]".repeat(40)
        );
        assert!(usual(deep.as_bytes()).is_none());
        assert_eq!(parse(deep.as_bytes()).ok(), serde(&deep));
        assert!(usual(b"{\"actions\":[{\"set_vars\":{\"a\":\"\xff\"}}]}").is_none());
    }

    #[test]
    fn parse_reads_every_answer_serde_reads_and_refuses_the_rest() {
        for text in [
            "{}",
            r#"{"actions":[{"set_vars":{"a":1}}]}"#,
            r#"{"actions":[{"route":{"to":["x"],"mode":"replace"}}],"log":["l"]}"#,
            r#"{"actions":[{"set_vars":{"a":-1.5}}]}"#,
        ] {
            assert_eq!(parse(text.as_bytes()).ok(), serde(text), "{text}");
        }
        let refused = parse(br#"{"actions":[{"launch":{}}]}"#).expect_err("unknown action");
        assert!(
            matches!(&refused, HookFailure::BadOutput(detail) if detail.contains("launch")),
            "{refused:?}"
        );
    }
}
