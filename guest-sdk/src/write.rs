//! Writes a hook's answer ([`Output`]) as JSON, by hand: byte for byte what
//! `serde_json::to_writer` writes for it (same keys, same order, same omissions; the tests
//! compare the two), without serde's machinery, which in wasm cost about as much as the
//! rest of a small hook's call. Strings without characters to escape (the usual case) are
//! copied as they are; anything else (escapes, floats, the free-form values of `set_vars`
//! and `send`) goes through serde_json.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::action::{Action, LogLevel, Output, RouteMode};

/// Appends `output` as JSON to `out`.
pub fn output(output: &Output, out: &mut Vec<u8>) {
    out.push(b'{');
    let mut first = true;
    if !output.actions.is_empty() {
        first = false;
        out.extend_from_slice(b"\"actions\":[");
        for (index, action) in output.actions.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            write_action(action, out);
        }
        out.push(b']');
    }
    if !output.log.is_empty() {
        if !first {
            out.push(b',');
        }
        out.extend_from_slice(b"\"log\":");
        strings(&output.log, out);
    }
    out.push(b'}');
}

fn write_action(action: &Action, out: &mut Vec<u8>) {
    match action {
        Action::Continue => out.extend_from_slice(b"\"continue\""),
        Action::Reject { reason } => {
            out.extend_from_slice(b"{\"reject\":{\"reason\":");
            string(reason, out);
            out.extend_from_slice(b"}}");
        }
        Action::SetVars(vars) => {
            out.extend_from_slice(b"{\"set_vars\":");
            map(vars, out);
            out.push(b'}');
        }
        Action::Send {
            performative,
            to,
            content,
        } => {
            out.extend_from_slice(b"{\"send\":{\"performative\":");
            string(performative, out);
            out.extend_from_slice(b",\"to\":");
            strings(to, out);
            if !content.is_null() {
                out.extend_from_slice(b",\"content\":");
                value(content, out);
            }
            out.extend_from_slice(b"}}");
        }
        Action::Route { to, mode } => {
            out.extend_from_slice(b"{\"route\":{\"to\":");
            strings(to, out);
            out.extend_from_slice(match mode {
                RouteMode::Add => b",\"mode\":\"add\"}}",
                RouteMode::Replace => b",\"mode\":\"replace\"}}",
            });
        }
        Action::SetDeadline { in_ms } => {
            out.extend_from_slice(b"{\"set_deadline\":{\"in_ms\":");
            number(*in_ms, out);
            out.extend_from_slice(b"}}");
        }
        Action::ExtendDeadline { by_ms } => {
            out.extend_from_slice(b"{\"extend_deadline\":{\"by_ms\":");
            number(*by_ms, out);
            out.extend_from_slice(b"}}");
        }
        Action::Retry {
            after_ms,
            backoff,
            max_attempts,
        } => {
            out.extend_from_slice(b"{\"retry\":{\"after_ms\":");
            number(*after_ms, out);
            if let Some(backoff) = backoff {
                out.extend_from_slice(b",\"backoff\":");
                serialized(backoff, out);
            }
            if let Some(max_attempts) = max_attempts {
                out.extend_from_slice(b",\"max_attempts\":");
                number(u64::from(*max_attempts), out);
            }
            out.extend_from_slice(b"}}");
        }
        Action::Complete { outcome, reason } => {
            out.extend_from_slice(b"{\"complete\":{\"outcome\":");
            // The outcome names are serde's renames.
            serialized(outcome, out);
            if let Some(reason) = reason {
                out.extend_from_slice(b",\"reason\":");
                string(reason, out);
            }
            out.extend_from_slice(b"}}");
        }
        Action::Escalate { to, reason } => {
            out.extend_from_slice(b"{\"escalate\":{\"to\":");
            string(to, out);
            out.extend_from_slice(b",\"reason\":");
            string(reason, out);
            out.extend_from_slice(b"}}");
        }
        Action::Log { level, message } => {
            out.extend_from_slice(b"{\"log\":{\"level\":");
            out.extend_from_slice(match level {
                LogLevel::Debug => b"\"debug\"",
                LogLevel::Info => b"\"info\"",
                LogLevel::Warn => b"\"warn\"",
                LogLevel::Error => b"\"error\"",
            });
            out.extend_from_slice(b",\"message\":");
            string(message, out);
            out.extend_from_slice(b"}}");
        }
    }
}

/// A JSON string: copied between quotes when nothing in it needs escaping.
fn string(text: &str, out: &mut Vec<u8>) {
    if crate::json::needs_escape(text) {
        serialized(text, out);
    } else {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    }
}

fn strings(texts: &[String], out: &mut Vec<u8>) {
    out.push(b'[');
    for (index, text) in texts.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        string(text, out);
    }
    out.push(b']');
}

fn map(map: &Map<String, Value>, out: &mut Vec<u8>) {
    out.push(b'{');
    for (index, (key, item)) in map.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        string(key, out);
        out.push(b':');
        value(item, out);
    }
    out.push(b'}');
}

/// A free-form value: strings and whole numbers by hand, the rest through serde_json.
fn value(item: &Value, out: &mut Vec<u8>) {
    match item {
        Value::String(text) => string(text, out),
        Value::Number(whole) if whole.is_u64() => number(whole.as_u64().unwrap_or_default(), out),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Null => out.extend_from_slice(b"null"),
        other => serialized(other, out),
    }
}

/// A whole number in decimal.
fn number(mut value: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Anything through serde_json. Writing these types into a `Vec` cannot fail (string keys;
/// non-finite floats are written as `null`), so an error is not expected; if one came, the
/// value is written as `null` so the output stays JSON.
fn serialized<T: Serialize + ?Sized>(item: &T, out: &mut Vec<u8>) {
    let start = out.len();
    if serde_json::to_writer(&mut *out, item).is_err() {
        out.truncate(start);
        out.extend_from_slice(b"null");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Outcome;
    use serde_json::json;

    fn every_action() -> Vec<Action> {
        let mut vars = Map::new();
        vars.insert("status".into(), "pending".into());
        vars.insert("count".into(), 3.into());
        vars.insert("ratio".into(), json!(-0.5));
        vars.insert("nested".into(), json!({"a": [1, null, true, "x\"y"]}));
        vars.insert("flag".into(), false.into());
        vars.insert("none".into(), Value::Null);
        vars.insert("quo\"ted".into(), "tab\there".into());
        vec![
            Action::Continue,
            Action::reject("too \"much\" \\ money\n"),
            Action::SetVars(vars),
            Action::SetVars(Map::new()),
            Action::send("inform", "desk", json!({"done": true})),
            Action::send("cancel", "desk", Value::Null),
            Action::route_to(["risk", "special-risk"]),
            Action::Route {
                to: Vec::new(),
                mode: RouteMode::Replace,
            },
            Action::SetDeadline { in_ms: 0 },
            Action::ExtendDeadline { by_ms: u64::MAX },
            Action::retry(1000, 2.0, 3),
            Action::Retry {
                after_ms: 5,
                backoff: None,
                max_attempts: None,
            },
            Action::Retry {
                after_ms: 5,
                backoff: Some(f64::NAN),
                max_attempts: Some(0),
            },
            Action::complete(Outcome::NotUnderstood, "why"),
            Action::Complete {
                outcome: Outcome::Success,
                reason: None,
            },
            Action::escalate("human-review", "caf\u{e9} \u{1}"),
            Action::Log {
                level: LogLevel::Warn,
                message: "careful".into(),
            },
            Action::Log {
                level: LogLevel::Debug,
                message: String::new(),
            },
        ]
    }

    fn by_hand(output: &Output) -> String {
        let mut out = Vec::new();
        super::output(output, &mut out);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn the_output_is_what_serde_writes() {
        let outputs = [
            Output::default(),
            Output {
                actions: every_action(),
                log: Vec::new(),
            },
            Output {
                actions: Vec::new(),
                log: vec!["one".into(), "two \"2\"".into()],
            },
            Output {
                actions: vec![Action::set_var("risk_route", "standard")],
                log: vec!["line".into()],
            },
        ];
        for output in &outputs {
            let serde = serde_json::to_string(output).expect("serde");
            assert_eq!(by_hand(output), serde);
        }
        for action in every_action() {
            let output = Output {
                actions: vec![action],
                log: Vec::new(),
            };
            assert_eq!(
                by_hand(&output),
                serde_json::to_string(&output).expect("serde")
            );
        }
    }

    #[test]
    fn every_level_and_mode_is_written_like_serde() {
        for level in [
            LogLevel::Debug,
            LogLevel::Info,
            LogLevel::Warn,
            LogLevel::Error,
        ] {
            let output = Output {
                actions: vec![Action::Log {
                    level,
                    message: "m".into(),
                }],
                log: Vec::new(),
            };
            assert_eq!(
                by_hand(&output),
                serde_json::to_string(&output).expect("serde")
            );
        }
    }
}
