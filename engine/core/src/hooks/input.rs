//! Builds a hook's JSON event ([`HookInput`]) from a conversation, borrowing everything, and
//! writes it as JSON ([`encode`]).

use std::borrow::Cow;

use colloquy_protocol::conversation::ConversationStatus;
use colloquy_protocol::hook::{
    HOOKS_ABI_VERSION, HookConversation, HookInput, HookMessage, HookStatus, HookThread,
    HookTimeout,
};
use colloquy_protocol::message::{AgentId, Message};
use colloquy_protocol::template::{ConversationPart, HookEvent};
use serde_json::{Map, Value};

use crate::conversation::Conversation;
use crate::rules::TimeoutInfo;

/// The message an `on_message` hook sees: the accepted message, its receivers before routing
/// and its content as sent.
pub struct MessageFacts<'a> {
    /// The message being built (receivers not yet set).
    pub message: &'a Message,
    /// Its receivers before routing.
    pub receivers: &'a [AgentId],
    /// Its content.
    pub content: &'a Value,
}

/// The event for `hook` on `conversation` (as it was before the event).
pub fn hook_input<'a>(
    conversation: &'a Conversation,
    hook: HookEvent,
    now: u64,
    message: Option<MessageFacts<'a>>,
    timeout: Option<&'a TimeoutInfo>,
) -> HookInput<'a> {
    let started = &*conversation.started;
    let machine = &conversation.template.machine;
    let spec = conversation.template.hooks.as_ref();
    // Every part unless the template's `hooks.reads` lists the ones its hook reads.
    let reads = |part| spec.is_none_or(|spec| spec.event_carries(part));
    let config = spec
        .map(|spec| Cow::Borrowed(&spec.config))
        .unwrap_or(Cow::Owned(Value::Null));
    let template = reads(ConversationPart::Template);
    let parties = reads(ConversationPart::Parties);
    HookInput {
        abi_version: HOOKS_ABI_VERSION,
        hook,
        now,
        conversation: HookConversation {
            id: Cow::Borrowed(&started.id),
            template: template.then_some(Cow::Borrowed(&*started.template)),
            revision: template.then_some(Cow::Borrowed(&*started.revision)),
            status: match conversation.status {
                ConversationStatus::Active => HookStatus::Active,
                _ => HookStatus::Completed,
            },
            outcome: conversation.outcome,
            initiator: parties.then_some(Cow::Borrowed(&*started.initiator)),
            participants: parties.then(|| {
                started
                    .participants
                    .iter()
                    .map(|p| Cow::Borrowed(&**p))
                    .collect()
            }),
            threads: reads(ConversationPart::Threads).then(|| {
                conversation
                    .threads
                    .iter()
                    .map(|thread| HookThread {
                        participant: Cow::Borrowed(&thread.participant),
                        state: Cow::Borrowed(&machine.state(thread.state).name),
                        outcome: conversation.thread_outcome(thread),
                        deadline: thread.deadline,
                    })
                    .collect()
            }),
            vars: reads(ConversationPart::Vars).then_some(Cow::Borrowed(&conversation.vars)),
            parameters: reads(ConversationPart::Parameters)
                .then_some(Cow::Borrowed(&started.parameters)),
            context: reads(ConversationPart::Context).then_some(Cow::Borrowed(&started.context)),
            deadline: conversation.deadline,
            retry_attempts: conversation.retry.attempts,
        },
        message: message.map(|facts| HookMessage {
            id: Cow::Borrowed(&facts.message.id),
            performative: Cow::Borrowed(facts.message.performative.name()),
            sender: Cow::Borrowed(&facts.message.sender),
            receivers: facts
                .receivers
                .iter()
                .map(|r| Cow::Borrowed(&**r))
                .collect(),
            content: Cow::Borrowed(facts.content),
            in_reply_to: facts.message.in_reply_to.as_deref().map(Cow::Borrowed),
            reply_by: facts.message.reply_by,
        }),
        timeout: timeout.map(|info| HookTimeout {
            kind: Cow::Borrowed(info.kind),
            participant: info.participant.as_deref().map(Cow::Borrowed),
            attempt: info.attempt,
        }),
        config,
    }
}

/// Writes `input` as the JSON the hook receives: byte for byte what `serde_json::to_writer`
/// writes for [`HookInput`] (same field order, same omissions, same escapes; the tests
/// compare the two), but faster. Keys are literals, strings that need no escape (all the
/// ids and names of real conversations) are copied as they are, whole numbers are formatted
/// by hand, and the free-form values (vars, parameters, context, content, config) are walked
/// here too; only strings that need escapes and fractional numbers go through serde_json.
pub fn encode(input: &HookInput<'_>, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    out.extend_from_slice(b"{\"abi_version\":");
    number(out, u64::from(input.abi_version));
    out.extend_from_slice(b",\"hook\":\"");
    out.extend_from_slice(crate::hooks::event_name(input.hook).as_bytes());
    out.extend_from_slice(b"\",\"now\":");
    number(out, input.now);
    let conversation = &input.conversation;
    out.extend_from_slice(b",\"conversation\":{\"id\":");
    string(out, &conversation.id)?;
    optional_string(out, b",\"template\":", conversation.template.as_deref())?;
    optional_string(out, b",\"revision\":", conversation.revision.as_deref())?;
    out.extend_from_slice(match conversation.status {
        HookStatus::Active => b",\"status\":\"active\"",
        HookStatus::Completed => b",\"status\":\"completed\"",
    });
    if let Some(outcome) = &conversation.outcome {
        out.extend_from_slice(b",\"outcome\":");
        serde_json::to_writer(&mut *out, outcome)?;
    }
    optional_string(out, b",\"initiator\":", conversation.initiator.as_deref())?;
    if let Some(participants) = &conversation.participants {
        out.extend_from_slice(b",\"participants\":");
        strings(out, participants)?;
    }
    if let Some(threads) = &conversation.threads {
        out.extend_from_slice(b",\"threads\":[");
        for (index, thread) in threads.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"participant\":");
            string(out, &thread.participant)?;
            out.extend_from_slice(b",\"state\":");
            string(out, &thread.state)?;
            if let Some(outcome) = &thread.outcome {
                out.extend_from_slice(b",\"outcome\":");
                serde_json::to_writer(&mut *out, outcome)?;
            }
            optional_number(out, b",\"deadline\":", thread.deadline);
            out.push(b'}');
        }
        out.push(b']');
    }
    if let Some(vars) = &conversation.vars {
        out.extend_from_slice(b",\"vars\":");
        object(out, vars)?;
    }
    optional_value(out, b",\"parameters\":", conversation.parameters.as_deref())?;
    optional_value(out, b",\"context\":", conversation.context.as_deref())?;
    optional_number(out, b",\"deadline\":", conversation.deadline);
    out.extend_from_slice(b",\"retry_attempts\":");
    number(out, u64::from(conversation.retry_attempts));
    out.push(b'}');
    if let Some(message) = &input.message {
        out.extend_from_slice(b",\"message\":{\"id\":");
        string(out, &message.id)?;
        out.extend_from_slice(b",\"performative\":");
        string(out, &message.performative)?;
        out.extend_from_slice(b",\"sender\":");
        string(out, &message.sender)?;
        out.extend_from_slice(b",\"receivers\":");
        strings(out, &message.receivers)?;
        out.extend_from_slice(b",\"content\":");
        value(out, &message.content)?;
        optional_string(out, b",\"in_reply_to\":", message.in_reply_to.as_deref())?;
        optional_number(out, b",\"reply_by\":", message.reply_by);
        out.push(b'}');
    }
    if let Some(timeout) = &input.timeout {
        out.extend_from_slice(b",\"timeout\":{\"kind\":");
        string(out, &timeout.kind)?;
        optional_string(out, b",\"participant\":", timeout.participant.as_deref())?;
        out.extend_from_slice(b",\"attempt\":");
        number(out, u64::from(timeout.attempt));
        out.push(b'}');
    }
    out.extend_from_slice(b",\"config\":");
    value(out, &input.config)?;
    out.push(b'}');
    Ok(())
}

/// A JSON string: copied between quotes when nothing in it needs an escape, otherwise
/// escaped by serde_json.
fn string(out: &mut Vec<u8>, text: &str) -> Result<(), serde_json::Error> {
    if needs_escape(text.as_bytes()) {
        return serde_json::to_writer(&mut *out, text);
    }
    out.reserve(text.len() + 2);
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
    Ok(())
}

/// Whether `bytes` hold a quote, a backslash or a control character (what a JSON string
/// must escape). Word-wide: eight bytes at a time, and the last few (most of the event's
/// strings are names shorter than eight bytes) in one word read from overlapping loads,
/// since for a yes/no it does not matter that a byte is looked at twice.
fn needs_escape(bytes: &[u8]) -> bool {
    let len = bytes.len();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight"));
    let half = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four"));
    if len >= 8 {
        let mut at = 0;
        while at + 8 <= len {
            if escape_stops(word(at)) {
                return true;
            }
            at += 8;
        }
        return at < len && escape_stops(word(len - 8));
    }
    let word = match len {
        0 => return false,
        1..=3 => u64::from_le_bytes([
            bytes[0],
            bytes[len / 2],
            bytes[len - 1],
            b'a',
            b'a',
            b'a',
            b'a',
            b'a',
        ]),
        _ => u64::from(half(0)) | u64::from(half(len - 4)) << 32,
    };
    escape_stops(word)
}

/// Whether any of the eight bytes of `word` is a quote, a backslash or below 0x20. The
/// high bit of a byte that is zero in `x` is set by `x - ONES & !x & HIGHS` (and, by the
/// borrow, possibly some above it: a yes/no needs only the first).
fn escape_stops(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_bytes = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    (zero_bytes(word ^ (ONES * u64::from(b'"')))
        | zero_bytes(word ^ (ONES * u64::from(b'\\')))
        | (word.wrapping_sub(ONES * 0x20) & !word & HIGHS))
        != 0
}

fn strings(out: &mut Vec<u8>, texts: &[Cow<'_, str>]) -> Result<(), serde_json::Error> {
    out.push(b'[');
    for (index, text) in texts.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        string(out, text)?;
    }
    out.push(b']');
    Ok(())
}

/// A free-form value, written as serde_json writes it (compact, keys in the map's order).
/// Recursive like serde_json's own writer: every value here was parsed or built under
/// serde_json's nesting limit.
fn value(out: &mut Vec<u8>, value: &Value) -> Result<(), serde_json::Error> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => match n.as_u64() {
            Some(n) => number(out, n),
            // Negative and fractional numbers: serde_json's formatting (itoa, ryu).
            None => serde_json::to_writer(&mut *out, n)?,
        },
        Value::String(text) => string(out, text)?,
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                self::value(out, item)?;
            }
            out.push(b']');
        }
        Value::Object(map) => object(out, map)?,
    }
    Ok(())
}

fn object(out: &mut Vec<u8>, map: &Map<String, Value>) -> Result<(), serde_json::Error> {
    out.push(b'{');
    for (index, (key, item)) in map.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        string(out, key)?;
        out.push(b':');
        value(out, item)?;
    }
    out.push(b'}');
    Ok(())
}

/// `key` (`,"name":`) and the string, when there is one.
fn optional_string(
    out: &mut Vec<u8>,
    key: &[u8],
    text: Option<&str>,
) -> Result<(), serde_json::Error> {
    if let Some(text) = text {
        out.extend_from_slice(key);
        string(out, text)?;
    }
    Ok(())
}

/// `key` (`,"name":`) and the value, when there is one.
fn optional_value(
    out: &mut Vec<u8>,
    key: &[u8],
    json: Option<&Value>,
) -> Result<(), serde_json::Error> {
    if let Some(json) = json {
        out.extend_from_slice(key);
        value(out, json)?;
    }
    Ok(())
}

/// `key` (`,"name":`) and the number, when there is one.
fn optional_number(out: &mut Vec<u8>, key: &[u8], n: Option<u64>) {
    if let Some(n) = n {
        out.extend_from_slice(key);
        number(out, n);
    }
}

/// A whole number in decimal.
fn number(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn same_as_serde(value: serde_json::Value) {
        let input: HookInput<'_> = serde_json::from_value(value).expect("input");
        let mut fast = Vec::new();
        encode(&input, &mut fast).expect("encode");
        let serde = serde_json::to_vec(&input).expect("serde");
        assert_eq!(
            String::from_utf8_lossy(&fast),
            String::from_utf8_lossy(&serde)
        );
    }

    #[test]
    fn needs_escape_finds_every_stop_byte_wherever_it_is() {
        for len in 0..20 {
            let plain = "x".repeat(len);
            assert!(!needs_escape(plain.as_bytes()), "{len}");
            for at in 0..len {
                for stop in [b'"', b'\\', 0, 0x1f] {
                    let mut bytes = plain.clone().into_bytes();
                    bytes[at] = stop;
                    assert!(needs_escape(&bytes), "{len} {at} {stop}");
                }
            }
        }
        assert!(!needs_escape("é😀 ~\u{7f}\u{80}".as_bytes()));
    }

    #[test]
    fn encode_writes_what_serde_writes() {
        same_as_serde(json!({
            "abi_version": 1, "hook": "on_message", "now": 1767225600000u64,
            "conversation": {"id": "0197a5e2", "template": "credit", "revision": "sha256:5f",
                "status": "active", "initiator": "desk", "participants": ["bank", "risk"],
                "threads": [{"participant": "bank", "state": "open"},
                            {"participant": "risk", "state": "done", "outcome": "no_reply",
                             "deadline": 0}],
                "vars": {"b": [1, {"x": null}], "a": "é\u{1}"}, "parameters": {},
                "context": null, "deadline": u64::MAX, "retry_attempts": 4294967295u32},
            "message": {"id": "m", "performative": "request", "sender": "desk",
                "receivers": [], "content": {"amount": 1.5, "purpose": "a \"new\" car\n"},
                "in_reply_to": "m0", "reply_by": 17},
            "config": {"max_amount": 100000, "nested": {"list": [true, false]}}
        }));
        same_as_serde(json!({
            "abi_version": 1, "hook": "on_timeout", "now": 0,
            "conversation": {"id": "c\\1", "template": "t\u{7f}", "revision": "r\t",
                "status": "completed", "outcome": "timeout", "initiator": "ä😀",
                "participants": [], "threads": [], "vars": {}, "parameters": [1, "x"],
                "context": {"k": "v"}, "retry_attempts": 0},
            "timeout": {"kind": "thread", "participant": "bank", "attempt": 3},
            "config": null
        }));
        same_as_serde(json!({
            "abi_version": 1, "hook": "on_start", "now": 5,
            "conversation": {"id": "c", "template": "t", "revision": "r", "status": "active",
                "initiator": "a", "participants": ["b"], "threads": [], "vars": {},
                "parameters": "text", "context": 3, "retry_attempts": 1},
            "timeout": {"kind": "retry", "attempt": 1},
            "config": [1, 2]
        }));
        same_as_serde(json!({
            "abi_version": 1, "hook": "on_message", "now": 5,
            "conversation": {"id": "c", "template": "t", "revision": "r", "status": "active",
                "initiator": "a", "participants": ["b"], "threads": [], "vars": {},
                "parameters": {}, "context": {}, "retry_attempts": 1},
            "message": {"id": "m", "performative": "inform", "sender": "b",
                "receivers": ["a"], "content": null},
            "config": {}
        }));
        // Every kind of free-form value, with escapes in keys and strings.
        same_as_serde(json!({
            "abi_version": 1, "hook": "on_message", "now": 5,
            "conversation": {"id": "c", "status": "active", "retry_attempts": 0,
                "vars": {"n": [0, -1, i64::MIN, u64::MAX, 0.1, -2.5e-8, 1e300, 12.0],
                    "t": [true, false, null, [], {}, [[{"deep": [null]}]]],
                    "k\"ey\u{1f}": "v\\al\u{0}ue", "long string without escapes": "0123456789abcdef"}},
            "message": {"id": "m", "performative": "inform", "sender": "b",
                "receivers": ["a"], "content": ["é", "quote \" at 8", "1234567\""]},
            "config": {"a": {"b": {"c": -0.0}}, "esc": "tab\there"}
        }));
        // Parts a template's `hooks.reads` left out.
        same_as_serde(json!({
            "abi_version": 1, "hook": "on_message", "now": 5,
            "conversation": {"id": "c", "status": "active", "threads": [],
                "retry_attempts": 0},
            "message": {"id": "m", "performative": "inform", "sender": "b",
                "receivers": ["a"], "content": {"x": 1}},
            "config": null
        }));
        same_as_serde(json!({
            "abi_version": 1, "hook": "on_timeout", "now": 5,
            "conversation": {"id": "c", "revision": "r", "status": "completed",
                "outcome": "success", "participants": ["b"], "vars": {"v": 1},
                "deadline": 9, "retry_attempts": 2},
            "timeout": {"kind": "conversation", "attempt": 0},
            "config": null
        }));
    }
}
