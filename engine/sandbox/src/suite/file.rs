//! The test file format (`kind: TemplateTest`), as serde reads it and as `colloquy
//! templates schema --kind test` describes it. `docs/templates.md` ("Testing templates")
//! documents every key; this module is its source of truth.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The only `kind` of a test file.
pub const TEST_KIND: &str = "TemplateTest";

/// A test file: cases run against one template (or several, each case against each).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestFile {
    /// Format version: `colloquy.dev/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// Always `TemplateTest`.
    pub kind: String,
    /// The template under test: a name among the templates of the test file's directory,
    /// or a path to a template file (relative to the test file). A list runs every case
    /// against each (the same policy built with different hook languages, say).
    pub template: TemplateRef,
    /// The cases, run in order, each in a fresh in-memory engine.
    pub cases: Vec<Case>,
}

/// One template, or several.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum TemplateRef {
    /// One template.
    One(String),
    /// Every case runs against each.
    Many(Vec<String>),
}

impl TemplateRef {
    /// The names or paths, in order.
    pub fn all(&self) -> Vec<&str> {
        match self {
            TemplateRef::One(one) => vec![one.as_str()],
            TemplateRef::Many(many) => many.iter().map(String::as_str).collect(),
        }
    }
}

/// One conversation, from its start through its steps.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What the case shows; printed with its result.
    pub name: String,
    /// How the conversation starts.
    pub start: Start,
    /// What happens next, in order.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// What must hold once every step ran.
    #[serde(default)]
    pub expect: Option<Expect>,
}

/// The start: what `POST /v1/conversations` takes, with the caller as `initiator`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Start {
    /// The agent starting the conversation (over HTTP, the caller).
    pub initiator: String,
    /// The participants.
    pub participants: Vec<String>,
    /// The template's parameters.
    #[serde(default)]
    pub parameters: Value,
    /// Context given to the conversation.
    #[serde(default)]
    pub context: Value,
    /// The conversation's deadline, in milliseconds from the start.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// The conversation's id (default: `case-N`, N numbering the cases from 1).
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// The opening message, sent by the initiator.
    #[serde(default)]
    pub message: Option<Message>,
    /// What must hold right after the start.
    #[serde(default)]
    pub expect: Option<Expect>,
    /// The engine must refuse the start, with this error.
    #[serde(default)]
    pub refused: Option<Refused>,
}

/// One step: a message sent, or the clock advanced. Exactly one of `send` and `advance`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// A message into the conversation, as `POST …/messages` takes it, with its sender
    /// (`from`).
    #[serde(default)]
    pub send: Option<Message>,
    /// Moves the engine's clock forward by this long (`30s`, `6m`, `1h30m`, `250ms`, `2d`),
    /// firing every deadline it passes, in order.
    #[serde(default)]
    pub advance: Option<Duration>,
    /// What must hold after the step.
    #[serde(default)]
    pub expect: Option<Expect>,
    /// The engine must refuse the message, with this error.
    #[serde(default)]
    pub refused: Option<Refused>,
}

/// What `POST …/messages` takes, and who sends it.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// The sender, the initiator or a participant: required in a step's `send`; a start's
    /// opening message is the initiator's.
    #[serde(default)]
    pub from: Option<String>,
    /// The performative, one the template names.
    pub performative: String,
    /// Receivers (default: as the template routes it).
    #[serde(default)]
    pub to: Vec<String>,
    /// The content.
    #[serde(default)]
    pub content: Value,
    /// The message's id (default: `msg-N`: `msg-0` for the opening message, then N numbering
    /// the steps from 1).
    #[serde(default)]
    pub message_id: Option<String>,
    /// The id of the message this one answers.
    #[serde(default)]
    pub in_reply_to: Option<String>,
    /// The reply-by the sender asks for: a duration from the test clock (`30s`) or Unix
    /// milliseconds.
    #[serde(default)]
    pub reply_by: Option<ReplyBy>,
}

/// A reply-by: relative or absolute.
#[derive(Clone, Copy, Debug, JsonSchema)]
#[schemars(untagged)]
pub enum ReplyBy {
    /// This long after the step's time, written as a duration (`30s`).
    After(Duration),
    /// At this Unix time in milliseconds.
    At(u64),
}

impl<'de> Deserialize<'de> for ReplyBy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ReplyBy, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            At(u64),
            After(String),
        }
        match Raw::deserialize(deserializer) {
            Ok(Raw::At(at)) => Ok(ReplyBy::At(at)),
            Ok(Raw::After(text)) => Duration::parse(&text)
                .map(ReplyBy::After)
                .map_err(serde::de::Error::custom),
            Err(_) => Err(serde::de::Error::custom(
                "a reply_by is a duration such as `30s` or Unix milliseconds",
            )),
        }
    }
}

/// The error the engine must answer with. Both keys compare partially: only what is named.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Refused {
    /// The error code, as the HTTP API's `error.code` says it (`schema_violation`,
    /// `out_of_protocol`, `unknown_performative`, …).
    #[serde(default)]
    pub code: Option<String>,
    /// The JSON pointer the error names, as `error.pointer` says it.
    #[serde(default)]
    pub pointer: Option<String>,
}

/// What must hold. Keys compare partially (only what is named); lists compare element by
/// element, each element partially, and must have exactly the length written. State keys
/// read the conversation as it stands; `messages`, `violations` and `hooks` list what the
/// step added (under a case's own `expect`: everything the conversation holds).
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// `active` or `completed`.
    #[serde(default)]
    pub status: Option<String>,
    /// The outcome (`success`, `failure`, `timeout`, …); `null` for none yet.
    #[serde(default, deserialize_with = "some_value")]
    #[schemars(with = "Option<Value>")]
    pub outcome: Option<Value>,
    /// Each named participant's thread state.
    #[serde(default)]
    pub threads: Option<BTreeMap<String, String>>,
    /// Variables (partially).
    #[serde(default)]
    pub vars: Option<Value>,
    /// The commitments, in creation order: `name`, `debtor`, `creditor`, `state`,
    /// `deadline`, `id`, `created_by`.
    #[serde(default)]
    pub commitments: Option<Vec<Value>>,
    /// Violations: `kind`, `agent`, `message_id`, `detail`, `at`.
    #[serde(default)]
    pub violations: Option<Vec<Value>>,
    /// Messages: `from`, `to`, `performative`, `content`, `id`, `in_reply_to`, `reply_by`,
    /// `sent_at`.
    #[serde(default)]
    pub messages: Option<Vec<Value>>,
    /// Hook calls: `event` (`on_start`, `on_message`, `on_timeout`) and `answer` (the
    /// hook's output), or `error` when the call failed.
    #[serde(default)]
    pub hooks: Option<Vec<Value>>,
}

/// A present key read as `Some`, `null` included.
fn some_value<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// A duration written as `250ms`, `30s`, `6m`, `1h30m` or `2d` (or an integer of
/// milliseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[schemars(with = "DurationText")]
pub struct Duration {
    /// Milliseconds.
    pub ms: u64,
}

/// How a duration is written, for the schema.
#[derive(JsonSchema)]
#[schemars(untagged)]
#[allow(dead_code, reason = "only its schema is used")]
enum DurationText {
    /// `250ms`, `30s`, `6m`, `1h30m`, `2d`.
    Text(DurationString),
    /// Milliseconds.
    Ms(u64),
}

/// A duration's text, for the schema: digits and units.
#[derive(JsonSchema)]
#[schemars(transparent)]
#[allow(dead_code, reason = "only its schema is used")]
struct DurationString(#[schemars(pattern(r"^([0-9]+(ms|s|m|h|d))+$"))] String);

impl Duration {
    /// Reads `250ms`, `30s`, `6m`, `1h30m`, `2d`: one or more numbers, each with its unit.
    pub fn parse(text: &str) -> Result<Duration, DurationError> {
        let error = || DurationError(text.to_owned());
        let mut rest = text.trim();
        if rest.is_empty() {
            return Err(error());
        }
        let mut ms: u64 = 0;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(error());
            }
            let number: u64 = rest[..digits].parse().map_err(|_| error())?;
            rest = &rest[digits..];
            let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            let unit = match &rest[..unit_len] {
                "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => return Err(error()),
            };
            rest = &rest[unit_len..];
            ms = number
                .checked_mul(unit)
                .and_then(|part| ms.checked_add(part))
                .ok_or_else(error)?;
        }
        Ok(Duration { ms })
    }
}

/// A duration that does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a duration: write a number and a unit, such as `250ms`, `30s`, `6m`, `1h30m` or `2d`"
)]
pub struct DurationError(String);

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as `30s` or `6m`")
            }
            fn visit_u64<E: serde::de::Error>(self, ms: u64) -> Result<Duration, E> {
                Ok(Duration { ms })
            }
            fn visit_i64<E: serde::de::Error>(self, ms: i64) -> Result<Duration, E> {
                u64::try_from(ms)
                    .map(|ms| Duration { ms })
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Duration, E> {
                Duration::parse(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The JSON Schema of the test file format.
pub fn test_json_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(TestFile)).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_every_unit_and_sums_of_them() {
        let ms = |text| Duration::parse(text).map(|d| d.ms);
        assert_eq!(ms("250ms"), Ok(250));
        assert_eq!(ms("30s"), Ok(30_000));
        assert_eq!(ms("6m"), Ok(360_000));
        assert_eq!(ms("1h30m"), Ok(5_400_000));
        assert_eq!(ms("2d"), Ok(172_800_000));
        for bad in [
            "",
            "6",
            "m",
            "6 minutes",
            "1.5h",
            "-3s",
            "99999999999999999999d",
        ] {
            assert!(ms(bad).is_err(), "{bad:?} read as a duration");
        }
    }

    #[test]
    fn the_schema_describes_every_top_level_key() {
        let schema = test_json_schema();
        let properties = &schema["properties"];
        for key in ["apiVersion", "kind", "template", "cases"] {
            assert!(properties.get(key).is_some(), "{key} missing: {schema}");
        }
    }
}
