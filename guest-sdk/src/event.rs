//! The event a hook is called with: the JSON of `docs/hook-input.schema.json`, read lazily.
//!
//! [`Event`] borrows from the input text: names and ids are [`Cow`]s that point into it
//! (owned only when the JSON escapes a character), and the free-form parts (`vars`,
//! `parameters`, `context`, `config` and the message content) stay raw JSON text
//! ([`RawJson`]) until the hook asks for something in them. The accessors pick one field
//! out of such an object without building a tree ([`field`]) and convert only that value:
//!
//! - one field: [`Event::content_u64`], [`Event::content_str`], [`Event::config_str`],
//!   [`Event::var_u64`], ... (or `*_as::<T>` for any `Deserialize` type);
//! - the whole part as your own type: [`Event::content`], [`Event::parameters`],
//!   [`Event::context`], [`Event::config`] (a `#[derive(Deserialize)]` struct, or
//!   [`serde_json::Value`] if you really want a tree);
//! - nested values: [`field`] and [`as_u64`] / [`as_str`] / [`as_f64`] / [`as_type`] on the
//!   raw value an accessor returned.
//!
//! The event itself is read in one pass by the SDK's own JSON reader
//! ([`crate::json`](mod@crate::json)); your types are read by serde. Unknown fields are
//! ignored, so a hook built against this SDK keeps working when a newer engine adds some.

use std::borrow::Cow;

use serde::de::IntoDeserializer;
use serde::Deserialize;

use crate::action::Outcome;
use crate::json::Reader;
pub use crate::json::{as_f64, as_str, as_type, as_u64, field, Error, RawJson};

/// Which lifecycle event a call is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// The conversation starts.
    OnStart,
    /// A message arrives.
    OnMessage,
    /// A deadline passed or a retry came due.
    OnTimeout,
}

/// One call's event, borrowing from the input text.
#[derive(Clone, Debug)]
pub struct Event<'a> {
    /// The ABI version of the engine (1).
    pub abi_version: u32,
    /// Which lifecycle event.
    pub hook: HookKind,
    /// The engine's clock (Unix milliseconds).
    pub now: u64,
    /// The conversation before this event.
    pub conversation: Conversation<'a>,
    /// For `on_message`: the message.
    pub message: Option<Message<'a>>,
    /// For `on_timeout`: what came due.
    pub timeout: Option<Timeout<'a>>,
    /// The template's `spec.hooks.config`, unparsed (`None` when absent or `null`).
    pub config: Option<RawJson<'a>>,
}

/// The conversation.
#[derive(Clone, Debug, Default)]
pub struct Conversation<'a> {
    /// Its id.
    pub id: Cow<'a, str>,
    /// The template's name (empty when the template's `hooks.reads` leaves out
    /// `template`).
    pub template: Cow<'a, str>,
    /// The template revision it is pinned to (as `template`).
    pub revision: Cow<'a, str>,
    /// `active` or `completed`.
    pub status: Cow<'a, str>,
    /// The outcome, once completed.
    pub outcome: Option<Outcome>,
    /// The initiator (empty when `hooks.reads` leaves out `parties`).
    pub initiator: Cow<'a, str>,
    /// The participants (as `initiator`).
    pub participants: Vec<Cow<'a, str>>,
    /// Each participant's thread (empty when `hooks.reads` leaves out `threads`).
    pub threads: Vec<Thread<'a>>,
    /// Variables set by hooks and declarative actions (an object), unparsed: see
    /// [`Event::var`]. `None` also when `hooks.reads` leaves out `vars`, and likewise
    /// for `parameters` and `context`.
    pub vars: Option<RawJson<'a>>,
    /// The start parameters, unparsed: see [`Event::parameters`].
    pub parameters: Option<RawJson<'a>>,
    /// The context snapshot, unparsed: see [`Event::context`].
    pub context: Option<RawJson<'a>>,
    /// The conversation deadline (Unix milliseconds).
    pub deadline: Option<u64>,
    /// Retries fired so far.
    pub retry_attempts: u32,
}

/// A participant thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Thread<'a> {
    /// The participant.
    pub participant: Cow<'a, str>,
    /// Its state's name.
    pub state: Cow<'a, str>,
    /// Its outcome, when terminal.
    pub outcome: Option<Outcome>,
    /// Its reply-by deadline.
    pub deadline: Option<u64>,
}

/// The message an `on_message` call handles.
#[derive(Clone, Debug, Default)]
pub struct Message<'a> {
    /// Its id.
    pub id: Cow<'a, str>,
    /// The performative.
    pub performative: Cow<'a, str>,
    /// The sender.
    pub sender: Cow<'a, str>,
    /// Receivers before routing.
    pub receivers: Vec<Cow<'a, str>>,
    /// The content, unparsed (`None` when absent or `null`): see [`Event::content`].
    pub content: Option<RawJson<'a>>,
    /// The message it answers.
    pub in_reply_to: Option<Cow<'a, str>>,
    /// Its reply-by.
    pub reply_by: Option<u64>,
}

/// What an `on_timeout` call handles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeout<'a> {
    /// `conversation`, `thread` or `retry`.
    pub kind: Cow<'a, str>,
    /// For `thread`: whose reply-by passed.
    pub participant: Option<Cow<'a, str>>,
    /// For `retry`: which retry (1 for the first); otherwise retries so far.
    pub attempt: u32,
}

impl<'a> Event<'a> {
    /// Parses an event from its JSON text, borrowing from it.
    pub fn from_json(text: &'a [u8]) -> Result<Event<'a>, Error> {
        let text =
            std::str::from_utf8(text).map_err(|error| Error::invalid_utf8(error.valid_up_to()))?;
        let mut reader = Reader::new(text);
        let event = read_event(&mut reader)?;
        reader.end()?;
        Ok(event)
    }

    // --- message content -------------------------------------------------------------

    /// The whole message content as `T` (a `#[derive(Deserialize)]` struct, a
    /// [`serde_json::Value`], ...). Without a message or content, `T` is read from `null`
    /// (so `Option<T>` gives `None`).
    pub fn content<T: Deserialize<'a>>(&self) -> Result<T, serde_json::Error> {
        parse_or_null(self.content_raw())
    }

    /// The message content, unparsed.
    pub fn content_raw(&self) -> Option<RawJson<'a>> {
        self.message.as_ref().and_then(|message| message.content)
    }

    /// A top-level field of the message content, unparsed (`None` when the content is not
    /// an object or lacks it).
    pub fn content_field(&self, name: &str) -> Option<RawJson<'a>> {
        field(self.content_raw()?, name)
    }
    /// A top-level field of the message content as `T` (`None` when missing or not a `T`).
    pub fn content_as<T: Deserialize<'a>>(&self, name: &str) -> Option<T> {
        as_type(self.content_field(name)?)
    }

    /// A top-level field of the message content as text (borrowed unless it has escapes).
    pub fn content_str(&self, name: &str) -> Option<Cow<'a, str>> {
        crate::json::field_str(self.content_raw()?, name)
    }

    /// A top-level field of the message content as a whole number (non-negative floats are
    /// truncated).
    pub fn content_u64(&self, name: &str) -> Option<u64> {
        crate::json::field_u64(self.content_raw()?, name)
    }

    /// A top-level field of the message content as a number.
    pub fn content_f64(&self, name: &str) -> Option<f64> {
        as_f64(self.content_field(name)?)
    }

    /// A top-level field of the message content as a boolean.
    pub fn content_bool(&self, name: &str) -> Option<bool> {
        as_type(self.content_field(name)?)
    }

    // --- spec.hooks.config -----------------------------------------------------------

    /// The whole `spec.hooks.config` as `T` (read from `null` when absent).
    pub fn config<T: Deserialize<'a>>(&self) -> Result<T, serde_json::Error> {
        parse_or_null(self.config)
    }

    /// A top-level field of `spec.hooks.config`, unparsed.
    pub fn config_field(&self, name: &str) -> Option<RawJson<'a>> {
        field(self.config?, name)
    }

    /// A top-level field of `spec.hooks.config` as `T`.
    pub fn config_as<T: Deserialize<'a>>(&self, name: &str) -> Option<T> {
        as_type(self.config_field(name)?)
    }

    /// A top-level field of `spec.hooks.config` as text.
    pub fn config_str(&self, name: &str) -> Option<Cow<'a, str>> {
        crate::json::field_str(self.config?, name)
    }

    /// A top-level field of `spec.hooks.config` as a whole number.
    pub fn config_u64(&self, name: &str) -> Option<u64> {
        crate::json::field_u64(self.config?, name)
    }

    /// A top-level field of `spec.hooks.config` as a number.
    pub fn config_f64(&self, name: &str) -> Option<f64> {
        as_f64(self.config_field(name)?)
    }

    /// A top-level field of `spec.hooks.config` as a boolean.
    pub fn config_bool(&self, name: &str) -> Option<bool> {
        as_type(self.config_field(name)?)
    }

    // --- conversation vars, parameters, context --------------------------------------

    /// A variable of the conversation, unparsed.
    pub fn var(&self, name: &str) -> Option<RawJson<'a>> {
        field(self.conversation.vars?, name)
    }

    /// A variable of the conversation as `T`.
    pub fn var_as<T: Deserialize<'a>>(&self, name: &str) -> Option<T> {
        as_type(self.var(name)?)
    }

    /// A variable of the conversation as text.
    pub fn var_str(&self, name: &str) -> Option<Cow<'a, str>> {
        crate::json::field_str(self.conversation.vars?, name)
    }

    /// A variable of the conversation as a whole number.
    pub fn var_u64(&self, name: &str) -> Option<u64> {
        crate::json::field_u64(self.conversation.vars?, name)
    }

    /// The start parameters as `T` (read from `null` when absent).
    pub fn parameters<T: Deserialize<'a>>(&self) -> Result<T, serde_json::Error> {
        parse_or_null(self.conversation.parameters)
    }

    /// A top-level start parameter, unparsed.
    pub fn parameter(&self, name: &str) -> Option<RawJson<'a>> {
        field(self.conversation.parameters?, name)
    }

    /// The context snapshot as `T` (read from `null` when absent).
    pub fn context<T: Deserialize<'a>>(&self) -> Result<T, serde_json::Error> {
        parse_or_null(self.conversation.context)
    }

    // --- threads ---------------------------------------------------------------------

    /// The thread of `participant`.
    pub fn thread(&self, participant: &str) -> Option<&Thread<'a>> {
        self.conversation
            .threads
            .iter()
            .find(|thread| thread.participant == participant)
    }
}

fn parse_or_null<'a, T: Deserialize<'a>>(raw: Option<RawJson<'a>>) -> Result<T, serde_json::Error> {
    serde_json::from_str(raw.map_or("null", RawJson::get))
}

// --- reading the event -----------------------------------------------------------------

/// Reads an object, running the arm of each known key (string literals, listed in the
/// order the engine writes them) with `$reader` at its value, and the `_` arm for any other
/// key; an arm's `?` returns from the enclosing function.
///
/// The engine writes no whitespace and its keys need no escapes, so each key is first
/// looked for as the exact text `"name":` of the known keys after the last one read: one
/// or two word compares against a constant for the usual key, where reading it as a string
/// and comparing it with every name cost several times that in wasm. A key not found so
/// (another order, whitespace, escapes, an unknown key) is read as a string and compared
/// with [`crate::json::same`] (`==` on strings is a slow `memcmp` in wasm): same result.
macro_rules! read_object {
    ($reader:ident, { $($name:literal => $arm:expr,)* _ => $default:expr $(,)? }) => {{
        $reader.expect_object()?;
        let mut first = true;
        // The first known key that may come next, by its index in the list.
        let mut next = 0usize;
        while $reader.entry(first)? {
            first = false;
            // The known key here, by index (`usize::MAX`: none). The indices are constants
            // once inlined, so each step below compiles to straight-line compares.
            let mut found = usize::MAX;
            let mut index = 0usize;
            $(
                if found == usize::MAX
                    && index >= next
                    && $reader.eat(concat!("\"", $name, "\":"))
                {
                    found = index;
                }
                index += 1;
            )*
            if found == usize::MAX {
                let key = $reader.key_text()?;
                index = 0;
                $(
                    if found == usize::MAX && crate::json::same(&key, $name) {
                        found = index;
                    }
                    index += 1;
                )*
            }
            let _ = index;
            if found != usize::MAX {
                next = found + 1;
            }
            let mut at = 0usize;
            let mut done = false;
            $(
                if !done && found == at {
                    $arm;
                    done = true;
                }
                at += 1;
            )*
            let _ = at;
            if !done {
                $default;
            }
        }
    }};
}

/// A required field that was not there.
fn missing(field: &'static str, within: &'static str, reader: &Reader<'_>) -> Error {
    Error::missing(field, within, reader.position())
}

fn read_event<'a>(reader: &mut Reader<'a>) -> Result<Event<'a>, Error> {
    // Filled in place: the structs are large, and each move is a copy (in wasm, a call).
    let mut event = Event {
        abi_version: 0,
        hook: HookKind::OnMessage,
        now: 0,
        conversation: Conversation::default(),
        message: None,
        timeout: None,
        config: None,
    };
    let mut seen = Seen::default();
    read_object!(reader, {
        "abi_version" => event.abi_version = seen.mark(0, reader.u32())?,
        "hook" => event.hook = seen.mark(1, read_hook_kind(reader))?,
        "now" => event.now = seen.mark(2, reader.u64())?,
        "conversation" => seen.mark(3, read_conversation(reader, &mut event.conversation))?,
        "message" => {
            if reader.null()? {
                event.message = None;
            } else {
                let message = event.message.get_or_insert_with(Message::default);
                read_message(reader, message)?;
            }
        },
        "timeout" => event.timeout = reader.optional(read_timeout)?,
        "config" => event.config = reader.optional_raw()?,
        _ => reader.skip()?,
    });
    seen.require(
        &["abi_version", "hook", "now", "conversation"],
        "the event",
        reader,
    )?;
    Ok(event)
}

/// Which required fields of an object were read (one bit each, by index).
#[derive(Default)]
struct Seen(u32);

impl Seen {
    /// Notes field `index` as read when `value` is `Ok`, and passes it on.
    #[inline]
    fn mark<T>(&mut self, index: u32, value: Result<T, Error>) -> Result<T, Error> {
        if value.is_ok() {
            self.0 |= 1 << index;
        }
        value
    }

    /// Fails, naming the first missing one, unless every field in `names` (by index) was read.
    fn require(
        &self,
        names: &[&'static str],
        within: &'static str,
        reader: &Reader<'_>,
    ) -> Result<(), Error> {
        match (0..names.len()).find(|&index| self.0 & (1 << index) == 0) {
            Some(index) => Err(missing(names[index], within, reader)),
            None => Ok(()),
        }
    }
}

fn read_hook_kind(reader: &mut Reader<'_>) -> Result<HookKind, Error> {
    let at = reader.position();
    // `same`, not a `match` on the text: in wasm that compares through `memcmp` calls.
    let kind = reader.string()?;
    if crate::json::same(&kind, "on_message") {
        Ok(HookKind::OnMessage)
    } else if crate::json::same(&kind, "on_start") {
        Ok(HookKind::OnStart)
    } else if crate::json::same(&kind, "on_timeout") {
        Ok(HookKind::OnTimeout)
    } else {
        Err(Error::unknown("hook", &kind, at))
    }
}

fn read_outcome(reader: &mut Reader<'_>) -> Result<Option<Outcome>, Error> {
    let at = reader.position();
    match reader.optional_string()? {
        None => Ok(None),
        Some(name) => {
            let name: &str = &name;
            Outcome::deserialize(name.into_deserializer())
                .map(Some)
                .map_err(|_: serde::de::value::Error| Error::unknown("outcome", name, at))
        }
    }
}

fn read_conversation<'a>(
    reader: &mut Reader<'a>,
    conversation: &mut Conversation<'a>,
) -> Result<(), Error> {
    let mut seen = Seen::default();
    read_object!(reader, {
        "id" => conversation.id = seen.mark(0, reader.string())?,
        "template" => conversation.template = reader.string()?,
        "revision" => conversation.revision = reader.string()?,
        "status" => conversation.status = seen.mark(1, reader.string())?,
        "outcome" => conversation.outcome = read_outcome(reader)?,
        "initiator" => conversation.initiator = reader.string()?,
        "participants" => conversation.participants = reader.strings()?,
        "threads" => conversation.threads = reader.list(read_thread)?,
        "vars" => conversation.vars = reader.optional_raw()?,
        "parameters" => conversation.parameters = reader.optional_raw()?,
        "context" => conversation.context = reader.optional_raw()?,
        "deadline" => conversation.deadline = reader.optional_u64()?,
        "retry_attempts" => conversation.retry_attempts = reader.u32()?,
        _ => reader.skip()?,
    });
    seen.require(&["id", "status"], "the conversation", reader)
}

fn read_thread<'a>(reader: &mut Reader<'a>) -> Result<Thread<'a>, Error> {
    let mut thread = Thread::default();
    let mut seen = Seen::default();
    read_object!(reader, {
        "participant" => thread.participant = seen.mark(0, reader.string())?,
        "state" => thread.state = seen.mark(1, reader.string())?,
        "outcome" => thread.outcome = read_outcome(reader)?,
        "deadline" => thread.deadline = reader.optional_u64()?,
        _ => reader.skip()?,
    });
    seen.require(&["participant", "state"], "a thread", reader)?;
    Ok(thread)
}

fn read_message<'a>(reader: &mut Reader<'a>, message: &mut Message<'a>) -> Result<(), Error> {
    let mut seen = Seen::default();
    read_object!(reader, {
        "id" => message.id = seen.mark(0, reader.string())?,
        "performative" => message.performative = seen.mark(1, reader.string())?,
        "sender" => message.sender = seen.mark(2, reader.string())?,
        "receivers" => message.receivers = seen.mark(3, reader.strings())?,
        "content" => message.content = reader.optional_raw()?,
        "in_reply_to" => message.in_reply_to = reader.optional_string()?,
        "reply_by" => message.reply_by = reader.optional_u64()?,
        _ => reader.skip()?,
    });
    seen.require(
        &["id", "performative", "sender", "receivers"],
        "the message",
        reader,
    )
}

fn read_timeout<'a>(reader: &mut Reader<'a>) -> Result<Timeout<'a>, Error> {
    let mut timeout = Timeout::default();
    let mut seen = Seen::default();
    read_object!(reader, {
        "kind" => timeout.kind = seen.mark(0, reader.string())?,
        "participant" => timeout.participant = reader.optional_string()?,
        "attempt" => timeout.attempt = seen.mark(1, reader.u32())?,
        _ => reader.skip()?,
    });
    seen.require(&["kind", "attempt"], "the timeout", reader)?;
    Ok(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENT: &str = r#"{
        "abi_version": 1, "hook": "on_message", "now": 7,
        "conversation": {
            "id": "c1", "template": "t", "revision": "r", "status": "active",
            "initiator": "desk", "participants": ["risk", "esc\u0061ped"],
            "threads": [{"participant": "risk", "state": "assessing", "deadline": 9}],
            "vars": {"status": "pending", "count": 3, "nested": {"a": [1, 2]}},
            "parameters": {"applicant": {"id": "A-17", "income": 5000}},
            "context": null, "retry_attempts": 2, "future_field": [1, {"x": null}]
        },
        "message": {
            "id": "m1", "performative": "request", "sender": "desk", "receivers": ["risk"],
            "content": {"note": {"amount": 1}, "amount": 1200, "purpose": "a \"new\" car",
                        "ratio": 0.5, "big": 12.9, "neg": -4, "ok": true,
                        "esc\u0061ped_key": "yes", "plain": "text"},
            "in_reply_to": "m0"
        },
        "config": {"max_amount": 50000, "agent": "special-risk", "strict": false}
    }"#;

    fn event() -> Event<'static> {
        Event::from_json(EVENT.as_bytes()).expect("event")
    }

    #[test]
    fn fixed_fields_borrow_from_the_input() {
        let event = event();
        assert_eq!(event.hook, HookKind::OnMessage);
        assert_eq!(event.conversation.retry_attempts, 2);
        assert!(matches!(event.conversation.id, Cow::Borrowed("c1")));
        assert!(matches!(
            event.conversation.participants[0],
            Cow::Borrowed("risk")
        ));
        // An escape forces a copy; the text is unescaped.
        assert!(matches!(&event.conversation.participants[1], Cow::Owned(s) if s == "escaped"));
        let message = event.message.as_ref().expect("message");
        assert!(matches!(message.receivers[0], Cow::Borrowed("risk")));
        assert!(matches!(message.in_reply_to, Some(Cow::Borrowed("m0"))));
        assert_eq!(event.thread("risk").expect("thread").deadline, Some(9));
        assert!(event.thread("nobody").is_none());
        assert!(event.conversation.context.is_none(), "null reads as None");
    }

    #[test]
    fn keys_read_alike_in_any_order_spacing_or_escape() {
        let compact = r#"{"abi_version":1,"hook":"on_message","now":7,"conversation":{"id":"c1","status":"active","threads":[{"participant":"risk","state":"s"}],"retry_attempts":2},"message":{"id":"m1","performative":"request","sender":"desk","receivers":["risk"],"content":{"a":1}},"config":{"k":"v"}}"#;
        let shuffled = r#"{ "config" : {"k":"v"}, "message": {"receivers":["risk"],"sender":"desk",
            "content":{"a":1},"performative":"request","id":"m1"}, "conversation":{"retry_attempts":2,
            "threads":[{"state":"s","participant":"risk"}],"status":"active","i\u0064":"c1"},
            "now":7, "extra":{"id":"x"}, "hook":"on_message", "abi_version":1 }"#;
        // A known key twice: the later value wins, as serde_json's derive would have it.
        let repeated = compact.replace(r#""now":7"#, r#""now":1,"now":7"#);
        for text in [compact, shuffled, &repeated] {
            let event = Event::from_json(text.as_bytes()).expect(text);
            assert_eq!((event.abi_version, event.now), (1, 7), "{text}");
            assert_eq!(event.conversation.id, "c1");
            assert_eq!(event.conversation.retry_attempts, 2);
            assert_eq!(event.conversation.threads[0].state, "s");
            let message = event.message.as_ref().expect("message");
            assert_eq!(message.performative, "request");
            assert_eq!(message.receivers, ["risk"]);
            assert_eq!(event.content_u64("a"), Some(1));
            assert_eq!(event.config_str("k").as_deref(), Some("v"));
        }
    }

    #[test]
    fn content_accessors_read_one_field() {
        let event = event();
        assert_eq!(event.content_u64("amount"), Some(1200));
        assert_eq!(event.content_u64("big"), Some(12), "floats are truncated");
        assert_eq!(event.content_u64("neg"), None);
        assert_eq!(event.content_u64("purpose"), None, "not a number");
        assert_eq!(event.content_f64("ratio"), Some(0.5));
        assert_eq!(event.content_bool("ok"), Some(true));
        assert_eq!(event.content_str("plain"), Some(Cow::Borrowed("text")));
        assert_eq!(event.content_str("amount"), None, "not a string");
        assert_eq!(event.content_as::<i64>("neg"), Some(-4));
    }

    #[test]
    fn escaped_strings_and_keys_are_unescaped() {
        let event = event();
        let purpose = event.content_str("purpose").expect("purpose");
        assert_eq!(purpose, "a \"new\" car");
        assert!(matches!(purpose, Cow::Owned(_)), "escapes force a copy");
        assert_eq!(
            event.content_str("escaped_key").as_deref(),
            Some("yes"),
            "keys are compared unescaped"
        );
    }

    #[test]
    fn missing_keys_and_missing_parts_are_none() {
        let event = event();
        assert_eq!(event.content_u64("absent"), None);
        assert_eq!(event.config_str("absent"), None);
        assert!(event.var("absent").is_none());
        // A key nested deeper is not a top-level field.
        assert!(event.content_field("a").is_none());
        let start = Event::from_json(
            br#"{"abi_version":1,"hook":"on_start","now":1,"conversation":{"id":"c",
            "template":"t","revision":"r","status":"active","initiator":"a",
            "participants":[],"threads":[],"vars":{},"parameters":{},"context":{},
            "retry_attempts":0},"config":null}"#,
        )
        .expect("event");
        assert!(start.message.is_none() && start.config.is_none());
        assert_eq!(start.content_u64("amount"), None);
        assert_eq!(start.config_u64("max_amount"), None);
        assert_eq!(start.content::<Option<u64>>().expect("null"), None);
        assert!(start.content::<u64>().is_err());
    }

    #[test]
    fn nested_values_are_reached_through_field() {
        let event = event();
        // The first key's value is an object holding a key of the same name as a later one.
        assert_eq!(event.content_u64("amount"), Some(1200));
        let note = event.content_field("note").expect("note");
        assert_eq!(field(note, "amount").and_then(as_u64), Some(1));
        let applicant = event.parameter("applicant").expect("applicant");
        assert_eq!(
            field(applicant, "id").and_then(as_str).as_deref(),
            Some("A-17")
        );
        let nested = event.var("nested").expect("nested");
        assert_eq!(field(nested, "a").map(RawJson::get), Some("[1, 2]"));
        assert_eq!(event.var_as::<Vec<u32>>("nested"), None, "not a list");
        assert_eq!(event.var_str("status").as_deref(), Some("pending"));
        assert_eq!(event.var_u64("count"), Some(3));
    }

    #[test]
    fn non_object_content_has_no_fields() {
        for content in ["[1, 2]", "\"amount\"", "42", "true"] {
            let text = EVENT.replace(
                r#""content": {"note""#,
                &format!(r#""content": {content}, "x": {{"note""#),
            );
            let event = Event::from_json(text.as_bytes()).expect("event");
            assert_eq!(event.content_u64("amount"), None, "content {content}");
            assert!(event.content_field("amount").is_none());
        }
        let raw = RawJson::new("[{\"amount\": 1}]").expect("raw");
        assert!(field(raw, "amount").is_none());
    }

    #[test]
    fn broken_events_are_refused_saying_what_and_where() {
        let start = r#"{"abi_version":1,"hook":"on_start","now":1,"conversation":{"id":"c","status":"active"}}"#;
        assert!(Event::from_json(start.as_bytes()).is_ok(), "the minimum");
        for (text, what) in [
            (
                start.replace(r#""id":"c","#, ""),
                "missing field `id` in the conversation",
            ),
            (
                start.replace(r#""now":1,"#, ""),
                "missing field `now` in the event",
            ),
            (
                start.replace("on_start", "on_stop"),
                "unknown hook `on_stop`",
            ),
            (
                start.replace(r#""now":1"#, r#""now":-1"#),
                "expected a whole number at byte 41",
            ),
            (
                start.replace(r#""now":1"#, r#""now":"1""#),
                "expected a whole number",
            ),
            (
                start.replace(r#""abi_version":1"#, r#""abi_version":4294967296"#),
                "number out of range",
            ),
            (
                start.replace(r#""now":1"#, r#""now":18446744073709551616"#),
                "expected a whole number at byte 41",
            ),
            (
                start.replace(r#""now":1"#, r#""now":01"#),
                "expected a whole number",
            ),
            (
                start.replace(r#""now":1"#, r#""now":1.5"#),
                "expected a whole number",
            ),
            (
                start.replace(r#""now":1"#, r#""now":1e3"#),
                "expected a whole number",
            ),
            (
                start.replace(r#""status":"active""#, r#""status":7"#),
                "expected a string",
            ),
            (
                start.replace(
                    r#""status":"active"}"#,
                    r#""status":"active","threads":[{"state":"s"}]}"#,
                ),
                "missing field `participant` in a thread",
            ),
            (format!("{start} x"), "trailing characters"),
            (
                start[..start.len() - 1].to_owned(),
                "expected `,` or `}`, found the end",
            ),
            (
                start.replace(r#"}}"#, r#"},"message":{"id":"m"}}"#),
                "missing field `performative` in the message",
            ),
            (
                start.replace(r#"}}"#, r#"},"timeout":{"kind":"retry"}}"#),
                "missing field `attempt` in the timeout",
            ),
            (
                start.replace(r#"}}"#, r#","outcome":"won"}}"#),
                "unknown outcome `won`",
            ),
        ] {
            let error = Event::from_json(text.as_bytes()).expect_err(&text);
            assert!(
                error.to_string().starts_with(what),
                "{text}: {error} (wanted {what})"
            );
        }
        let largest = start.replace(r#""now":1"#, r#""now":18446744073709551615"#);
        let event = Event::from_json(largest.as_bytes()).expect("u64::MAX");
        assert_eq!(event.now, u64::MAX);
        let error = Event::from_json(b"{\"abi_version\":1,\xff}").expect_err("not UTF-8");
        assert_eq!(error.to_string(), "invalid UTF-8 at byte 17");
    }

    #[test]
    fn free_form_parts_stay_text_however_deep_or_odd() {
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        let text = EVENT.replace(r#""context": null"#, &format!(r#""context": {deep}"#));
        let parsed = Event::from_json(text.as_bytes()).expect("event");
        assert_eq!(parsed.conversation.context.map(RawJson::get), Some(&*deep));
        let hostile = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        let text = EVENT.replace(r#""context": null"#, &format!(r#""context": {hostile}"#));
        let error = Event::from_json(text.as_bytes()).expect_err("too deep");
        assert!(
            error.to_string().starts_with("nested too deeply"),
            "{error}"
        );
        // Unknown fields of any shape are skipped.
        assert_eq!(event().conversation.retry_attempts, 2);
    }

    #[test]
    fn whole_parts_deserialize_into_user_types() {
        #[derive(Deserialize)]
        struct Request<'a> {
            amount: u64,
            #[serde(borrow)]
            purpose: Cow<'a, str>,
        }
        #[derive(Deserialize)]
        struct Config {
            max_amount: u64,
            #[serde(default)]
            strict: bool,
        }
        let event = event();
        let request: Request = event.content().expect("content");
        assert_eq!(request.amount, 1200);
        assert_eq!(request.purpose, "a \"new\" car");
        let config: Config = event.config().expect("config");
        assert_eq!((config.max_amount, config.strict), (50000, false));
        assert_eq!(event.config_str("agent").as_deref(), Some("special-risk"));
        assert_eq!(event.config_bool("strict"), Some(false));
        let parameters: serde_json::Value = event.parameters().expect("parameters");
        assert_eq!(parameters["applicant"]["income"], 5000);
        assert_eq!(
            event.context::<serde_json::Value>().expect("context"),
            serde_json::Value::Null
        );
    }
}
