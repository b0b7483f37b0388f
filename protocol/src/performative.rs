//! Performatives: the 22 FIPA communicative acts (SC00037) and template-declared intents.
//!
//! "inform-done" and "inform-result" are not acts of their own: both are `inform`, told apart
//! by content (see `fipa-notes.md`). An unknown name is an error, never coerced to a known act.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! fipa_acts {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// One of the 22 communicative acts of the FIPA library (SC00037), by its FIPA name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(missing_docs)]
        pub enum FipaAct { $($variant),* }

        impl FipaAct {
            /// Every act, in FIPA's (and JADE's) order.
            pub const ALL: &'static [FipaAct] = &[$(FipaAct::$variant),*];

            /// The act's FIPA name, e.g. `accept-proposal`.
            pub fn name(self) -> &'static str {
                match self { $(FipaAct::$variant => $name),* }
            }

            /// The act with this FIPA name, if there is one.
            pub fn from_name(name: &str) -> Option<FipaAct> {
                match name { $($name => Some(FipaAct::$variant),)* _ => None }
            }
        }
    };
}

fipa_acts! {
    AcceptProposal => "accept-proposal",
    Agree => "agree",
    Cancel => "cancel",
    Cfp => "cfp",
    Confirm => "confirm",
    Disconfirm => "disconfirm",
    Failure => "failure",
    Inform => "inform",
    InformIf => "inform-if",
    InformRef => "inform-ref",
    NotUnderstood => "not-understood",
    Propagate => "propagate",
    Propose => "propose",
    Proxy => "proxy",
    QueryIf => "query-if",
    QueryRef => "query-ref",
    Refuse => "refuse",
    RejectProposal => "reject-proposal",
    Request => "request",
    RequestWhen => "request-when",
    RequestWhenever => "request-whenever",
    Subscribe => "subscribe",
}

/// A performative: a FIPA act or an intent declared by a template (`spec.intents`).
///
/// Whether an intent is known depends on the template, so parsing a name that is not a FIPA
/// act yields [`Performative::Intent`]; the engine refuses intents its template does not declare.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Performative {
    /// A FIPA communicative act.
    Fipa(FipaAct),
    /// A template-declared intent such as `quote-request`.
    Intent(Arc<str>),
}

impl Performative {
    /// Parses a performative name; `None` when the name is not a well-formed identifier
    /// (lowercase ASCII letters, digits, `-` and `_`, starting with a letter, at most 64 bytes).
    pub fn parse(name: &str) -> Option<Performative> {
        if let Some(act) = FipaAct::from_name(name) {
            return Some(Performative::Fipa(act));
        }
        is_intent_name(name).then(|| Performative::Intent(Arc::from(name)))
    }

    /// The performative's name as written on the wire.
    pub fn name(&self) -> &str {
        match self {
            Performative::Fipa(act) => act.name(),
            Performative::Intent(name) => name,
        }
    }
}

/// Longest intent name accepted; keeps names usable as metric labels and map keys.
pub const MAX_INTENT_NAME_LEN: usize = 64;

/// Whether `name` is a well-formed intent name (see [`Performative::parse`]).
pub fn is_intent_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && name.len() <= MAX_INTENT_NAME_LEN
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

impl fmt::Display for Performative {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Performative {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Performative {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Performative::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("`{name}` is not a performative name")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_are_22_fipa_acts_and_names_round_trip() {
        assert_eq!(FipaAct::ALL.len(), 22);
        for act in FipaAct::ALL {
            assert_eq!(FipaAct::from_name(act.name()), Some(*act));
        }
    }

    #[test]
    fn inform_done_is_not_an_act_but_a_valid_intent_name() {
        assert_eq!(FipaAct::from_name("inform-done"), None);
        assert_eq!(
            Performative::parse("inform-done"),
            Some(Performative::Intent("inform-done".into()))
        );
    }

    #[test]
    fn malformed_names_are_refused() {
        for bad in ["", "Inform", "9lives", "a b", "x".repeat(65).as_str()] {
            assert_eq!(Performative::parse(bad), None, "{bad:?}");
        }
    }
}
