//! The event a hook is called with: the JSON of `docs/hook-input.schema.json`, read lazily.
//!
//! [`Event`] borrows from the input text: names and ids are [`Cow`]s that point into it
//! (owned only when the JSON escapes a character), and the free-form parts (`vars`,
//! `parameters`, `context`, `config` and the message `content`) stay raw JSON text
//! ([`RawValue`]) until the hook asks for something in them. The accessors pick one field
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
//! Unknown fields are ignored, so a hook built against this SDK keeps working when a newer
//! engine adds some.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
pub use serde_json::value::RawValue;

use crate::action::Outcome;

/// Which lifecycle event a call is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookKind {
    /// The conversation starts.
    OnStart,
    /// A message arrives.
    OnMessage,
    /// A deadline passed or a retry came due.
    OnTimeout,
}

/// One call's event, borrowing from the input text.
#[derive(Clone, Debug, Deserialize)]
pub struct Event<'a> {
    /// The ABI version of the engine (1).
    pub abi_version: u32,
    /// Which lifecycle event.
    pub hook: HookKind,
    /// The engine's clock (Unix milliseconds).
    pub now: u64,
    /// The conversation before this event.
    #[serde(borrow)]
    pub conversation: Conversation<'a>,
    /// For `on_message`: the message.
    #[serde(default, borrow)]
    pub message: Option<Message<'a>>,
    /// For `on_timeout`: what came due.
    #[serde(default, borrow)]
    pub timeout: Option<Timeout<'a>>,
    /// The template's `spec.hooks.config`, unparsed (`None` when absent or `null`).
    #[serde(default, borrow)]
    pub config: Option<&'a RawValue>,
}

/// The conversation.
#[derive(Clone, Debug, Deserialize)]
pub struct Conversation<'a> {
    /// Its id.
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    /// The template's name (empty when the template's `hooks.reads` leaves out
    /// `template`).
    #[serde(default, borrow)]
    pub template: Cow<'a, str>,
    /// The template revision it is pinned to (as `template`).
    #[serde(default, borrow)]
    pub revision: Cow<'a, str>,
    /// `active` or `completed`.
    #[serde(borrow)]
    pub status: Cow<'a, str>,
    /// The outcome, once completed.
    #[serde(default)]
    pub outcome: Option<Outcome>,
    /// The initiator (empty when `hooks.reads` leaves out `parties`).
    #[serde(default, borrow)]
    pub initiator: Cow<'a, str>,
    /// The participants (as `initiator`).
    #[serde(default, borrow, deserialize_with = "cow_vec")]
    pub participants: Vec<Cow<'a, str>>,
    /// Each participant's thread (empty when `hooks.reads` leaves out `threads`).
    #[serde(default, borrow)]
    pub threads: Vec<Thread<'a>>,
    /// Variables set by hooks and declarative actions (an object), unparsed: see
    /// [`Event::var`]. `None` also when `hooks.reads` leaves out `vars`, and likewise
    /// for `parameters` and `context`.
    #[serde(default, borrow)]
    pub vars: Option<&'a RawValue>,
    /// The start parameters, unparsed: see [`Event::parameters`].
    #[serde(default, borrow)]
    pub parameters: Option<&'a RawValue>,
    /// The context snapshot, unparsed: see [`Event::context`].
    #[serde(default, borrow)]
    pub context: Option<&'a RawValue>,
    /// The conversation deadline (Unix milliseconds).
    #[serde(default)]
    pub deadline: Option<u64>,
    /// Retries fired so far.
    #[serde(default)]
    pub retry_attempts: u32,
}

/// A participant thread.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Thread<'a> {
    /// The participant.
    #[serde(borrow)]
    pub participant: Cow<'a, str>,
    /// Its state's name.
    #[serde(borrow)]
    pub state: Cow<'a, str>,
    /// Its outcome, when terminal.
    #[serde(default)]
    pub outcome: Option<Outcome>,
    /// Its reply-by deadline.
    #[serde(default)]
    pub deadline: Option<u64>,
}

/// The message an `on_message` call handles.
#[derive(Clone, Debug, Deserialize)]
pub struct Message<'a> {
    /// Its id.
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    /// The performative.
    #[serde(borrow)]
    pub performative: Cow<'a, str>,
    /// The sender.
    #[serde(borrow)]
    pub sender: Cow<'a, str>,
    /// Receivers before routing.
    #[serde(borrow, deserialize_with = "cow_vec")]
    pub receivers: Vec<Cow<'a, str>>,
    /// The content, unparsed (`None` when absent or `null`): see [`Event::content`].
    #[serde(default, borrow)]
    pub content: Option<&'a RawValue>,
    /// The message it answers.
    #[serde(default, borrow, deserialize_with = "cow_opt")]
    pub in_reply_to: Option<Cow<'a, str>>,
    /// Its reply-by.
    #[serde(default)]
    pub reply_by: Option<u64>,
}

/// What an `on_timeout` call handles.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Timeout<'a> {
    /// `conversation`, `thread` or `retry`.
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    /// For `thread`: whose reply-by passed.
    #[serde(default, borrow, deserialize_with = "cow_opt")]
    pub participant: Option<Cow<'a, str>>,
    /// For `retry`: which retry (1 for the first); otherwise retries so far.
    pub attempt: u32,
}

impl<'a> Event<'a> {
    /// Parses an event from its JSON text, borrowing from it.
    pub fn from_json(text: &'a [u8]) -> Result<Event<'a>, serde_json::Error> {
        // One UTF-8 check of the whole text, then the `str` reader, which does not check
        // each string again (the slice reader would, string by string).
        match std::str::from_utf8(text) {
            Ok(text) => serde_json::from_str(text),
            Err(_) => serde_json::from_slice(text),
        }
    }

    // --- message content -------------------------------------------------------------

    /// The whole message content as `T` (a `#[derive(Deserialize)]` struct, a
    /// [`serde_json::Value`], ...). Without a message or content, `T` is read from `null`
    /// (so `Option<T>` gives `None`).
    pub fn content<T: Deserialize<'a>>(&self) -> Result<T, serde_json::Error> {
        parse_or_null(self.content_raw())
    }

    /// The message content, unparsed.
    pub fn content_raw(&self) -> Option<&'a RawValue> {
        self.message.as_ref().and_then(|message| message.content)
    }

    /// A top-level field of the message content, unparsed (`None` when the content is not
    /// an object or lacks it).
    pub fn content_field(&self, name: &str) -> Option<&'a RawValue> {
        field(self.content_raw()?, name)
    }

    /// A top-level field of the message content as `T` (`None` when missing or not a `T`).
    pub fn content_as<T: Deserialize<'a>>(&self, name: &str) -> Option<T> {
        as_type(self.content_field(name)?)
    }

    /// A top-level field of the message content as text (borrowed unless it has escapes).
    pub fn content_str(&self, name: &str) -> Option<Cow<'a, str>> {
        as_str(self.content_field(name)?)
    }

    /// A top-level field of the message content as a whole number (non-negative floats are
    /// truncated).
    pub fn content_u64(&self, name: &str) -> Option<u64> {
        as_u64(self.content_field(name)?)
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
    pub fn config_field(&self, name: &str) -> Option<&'a RawValue> {
        field(self.config?, name)
    }

    /// A top-level field of `spec.hooks.config` as `T`.
    pub fn config_as<T: Deserialize<'a>>(&self, name: &str) -> Option<T> {
        as_type(self.config_field(name)?)
    }

    /// A top-level field of `spec.hooks.config` as text.
    pub fn config_str(&self, name: &str) -> Option<Cow<'a, str>> {
        as_str(self.config_field(name)?)
    }

    /// A top-level field of `spec.hooks.config` as a whole number.
    pub fn config_u64(&self, name: &str) -> Option<u64> {
        as_u64(self.config_field(name)?)
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
    pub fn var(&self, name: &str) -> Option<&'a RawValue> {
        field(self.conversation.vars?, name)
    }

    /// A variable of the conversation as `T`.
    pub fn var_as<T: Deserialize<'a>>(&self, name: &str) -> Option<T> {
        as_type(self.var(name)?)
    }

    /// A variable of the conversation as text.
    pub fn var_str(&self, name: &str) -> Option<Cow<'a, str>> {
        as_str(self.var(name)?)
    }

    /// A variable of the conversation as a whole number.
    pub fn var_u64(&self, name: &str) -> Option<u64> {
        as_u64(self.var(name)?)
    }

    /// The start parameters as `T` (read from `null` when absent).
    pub fn parameters<T: Deserialize<'a>>(&self) -> Result<T, serde_json::Error> {
        parse_or_null(self.conversation.parameters)
    }

    /// A top-level start parameter, unparsed.
    pub fn parameter(&self, name: &str) -> Option<&'a RawValue> {
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

fn parse_or_null<'a, T: Deserialize<'a>>(
    raw: Option<&'a RawValue>,
) -> Result<T, serde_json::Error> {
    serde_json::from_str(raw.map_or("null", RawValue::get))
}

// --- reading raw JSON ----------------------------------------------------------------

/// The value of `key` in the JSON object `object`, unparsed; `None` when `object` is not an
/// object or has no such key. Only the keys before it are read (their values are skipped
/// without being built); the first occurrence of a repeated key wins.
pub fn field<'a>(object: &'a RawValue, key: &str) -> Option<&'a RawValue> {
    let text = object.get();
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let mut found = None;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    // Once the key is found the visitor stops reading, so serde_json reports the rest of the
    // object as unexpected: that error is expected and ignored (the text was validated when
    // the event was parsed).
    let _ = (&mut deserializer).deserialize_map(FieldFinder {
        key,
        found: &mut found,
    });
    found
}

/// A JSON value as text: borrowed from the input unless it has escapes. `None` when it is
/// not a string.
pub fn as_str(value: &RawValue) -> Option<Cow<'_, str>> {
    let mut deserializer = serde_json::Deserializer::from_str(value.get());
    (&mut deserializer).deserialize_str(CowStrVisitor).ok()
}

/// A JSON value as a whole number: a non-negative integer, or a non-negative float
/// truncated. `None` otherwise.
pub fn as_u64(value: &RawValue) -> Option<u64> {
    let mut deserializer = serde_json::Deserializer::from_str(value.get());
    (&mut deserializer).deserialize_any(U64Visitor).ok()
}

/// A JSON value as a number. `None` when it is not one.
pub fn as_f64(value: &RawValue) -> Option<f64> {
    as_type(value)
}

/// A JSON value as any `Deserialize` type. `None` when it does not fit.
pub fn as_type<'a, T: Deserialize<'a>>(value: &'a RawValue) -> Option<T> {
    serde_json::from_str(value.get()).ok()
}

/// Scans a map for one key; skips the values of the others with [`IgnoredAny`].
struct FieldFinder<'k, 'f, 'a> {
    key: &'k str,
    found: &'f mut Option<&'a RawValue>,
}

impl<'de, 'k, 'f> Visitor<'de> for FieldFinder<'k, 'f, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(matched) = map.next_key_seed(KeyIs(self.key))? {
            if matched {
                *self.found = Some(map.next_value()?);
                return Ok(());
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

/// A map key, compared with the wanted one without being copied (escaped keys are compared
/// unescaped).
struct KeyIs<'k>(&'k str);

impl<'de, 'k> DeserializeSeed<'de> for KeyIs<'k> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de, 'k> Visitor<'de> for KeyIs<'k> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

struct U64Visitor;

impl<'de> Visitor<'de> for U64Visitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a non-negative number")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        Ok(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
        u64::try_from(value).map_err(|_| E::custom("negative"))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<u64, E> {
        if value >= 0.0 {
            Ok(value as u64)
        } else {
            Err(E::custom("negative or not a number"))
        }
    }
}

/// Strings as `Cow`: borrowed when the input has them verbatim. (serde's own `Cow<str>`
/// always copies unless the field is `#[serde(borrow)]`, which does not reach into `Vec`s and
/// `Option`s.)
struct CowStrVisitor;

impl<'de> Visitor<'de> for CowStrVisitor {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, value: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(value))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(value))
    }
}

struct CowStr<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for CowStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(CowStrVisitor).map(CowStr)
    }
}

fn cow_opt<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    Ok(Option::<CowStr<'a>>::deserialize(deserializer)?.map(|text| text.0))
}

fn cow_vec<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Cow<'a, str>>, D::Error> {
    struct Strings;

    impl<'de> Visitor<'de> for Strings {
        type Value = Vec<Cow<'de, str>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of strings")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
            while let Some(CowStr(text)) = seq.next_element()? {
                out.push(text);
            }
            Ok(out)
        }
    }

    deserializer.deserialize_seq(Strings)
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
        assert_eq!(field(nested, "a").map(RawValue::get), Some("[1, 2]"));
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
        let raw = RawValue::from_string("[{\"amount\": 1}]".to_owned()).expect("raw");
        assert!(field(&raw, "amount").is_none());
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
