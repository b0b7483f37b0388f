//! Audit records: what `GET /v1/conversations/{id}/audit` hands a reader, and
//! [`verify`], which checks one offline (`colloquy audit verify`).
//!
//! A record holds the conversation's log as its reader may see it (the events it may see in
//! full, the others as their body digests: see [`crate::chain`]), the chain's length and
//! head, the template revision the conversation ran (its whole SHA-256, and the YAML source
//! and hook module hash when the server's revision archive holds them), and, when the server
//! has an audit key, the engine's signature over all of that but the events themselves, which
//! the head stands for. A verifier that trusts the engine's key then knows the log is the one
//! the engine recorded, event for event, in that order, under that revision; without the
//! engine's signature the record still proves itself consistent, and every signed message in
//! it proves its sender.

use std::collections::BTreeMap;

use colloquy_protocol::message::Message;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::chain::{self, GENESIS, PREV, REDACTED};
use crate::jws::{KeySet, Signature};

/// The `format` of the records this crate writes and reads.
pub const FORMAT: &str = "colloquy.audit/1";

/// The JWS `typ` of the engine's signature over a record.
pub const SIGNATURE_TYPE: &str = "colloquy-audit+jws";

/// An audit record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// [`FORMAT`].
    pub format: String,
    /// The conversation.
    pub conversation_id: String,
    /// The agent the record was made for, or `None` for an administrator (who sees all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader: Option<String>,
    /// The template revision the conversation ran.
    pub template: TemplateRecord,
    /// The log, in order, as the reader may see it.
    pub events: Vec<Value>,
    /// The chain over the log.
    pub chain: ChainSummary,
    /// When the record was made (Unix milliseconds, engine clock).
    pub issued_at: u64,
    /// The public keys (a JWKS each) the engine checked signed messages against, by
    /// sender: those of the senders of the signed messages the record shows.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub signer_keys: BTreeMap<String, Value>,
    /// The engine's signature, when the server has an audit key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_signature: Option<EngineSignature>,
}

/// The template revision a conversation ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemplateRecord {
    /// The template's name.
    pub name: String,
    /// The revision (`sha256:` and 16 hex digits).
    pub revision: String,
    /// The whole SHA-256 the revision abbreviates ([`chain::revision_digest`]), when the
    /// server's revision archive holds the revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The YAML source, from the archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The SHA-256 of the hook module, when the template has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_sha256: Option<String>,
}

/// The chain over a record's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainSummary {
    /// How many events the log holds.
    pub length: u64,
    /// The last event's chain hash ([`GENESIS`] for an empty log).
    pub head: String,
    /// The first event that carries `prev`: 1 unless the conversation was recorded before
    /// chains, whose older events the chain covers only from this one on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chained_from: Option<u64>,
}

/// The engine's signature over a record ([`signed_payload`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineSignature {
    /// The engine key's id.
    pub kid: String,
    /// A detached compact JWS (`protected..signature`, RFC 7515 appendix F).
    pub jws: String,
}

/// What the engine signs: every field of the record but the events (which the chain head
/// stands for) and the template source (which the digest stands for), in RFC 8785 form.
pub fn signed_payload(record: &AuditRecord) -> String {
    crate::jcs::canonicalize(&json!({
        "format": record.format,
        "conversation_id": record.conversation_id,
        "reader": record.reader,
        "template": record.template.name,
        "revision": record.template.revision,
        "template_sha256": record.template.sha256,
        "hook_sha256": record.template.hook_sha256,
        "chain_length": record.chain.length,
        "chain_head": record.chain.head,
        "chained_from": record.chain.chained_from,
        "issued_at": record.issued_at,
        "signer_keys": record.signer_keys,
    }))
}

/// The chain over `events` (each a JSON event as stored or as a record carries it): its
/// summary, or the first event that breaks it.
pub fn chain_of(events: &[Value]) -> Result<ChainSummary, Broken> {
    let mut walk = ChainWalk::default();
    for event in events {
        walk.take(event)?;
    }
    Ok(walk.summary())
}

/// The chain over `events` as they are, without checking it: what a log's summary says,
/// also when an event in it (altered in the store) breaks the chain, which the record's
/// verifier then finds.
pub fn fold_chain(events: &[Value]) -> ChainSummary {
    let mut walk = ChainWalk::default();
    for event in events {
        // A broken event still moves the head: the summary is of the log as it is.
        let _ = walk.take(event);
    }
    walk.summary()
}

/// A walk along a log's chain, one event at a time.
struct ChainWalk {
    head: String,
    length: u64,
    chained_from: Option<u64>,
}

impl Default for ChainWalk {
    fn default() -> ChainWalk {
        ChainWalk {
            head: GENESIS.to_owned(),
            length: 0,
            chained_from: None,
        }
    }
}

impl ChainWalk {
    /// Takes the next event into the chain, and says what is wrong with it, if anything: its
    /// place, its digest, its link to the event before. The head moves on either way.
    fn take(&mut self, event: &Value) -> Result<(), Broken> {
        self.length += 1;
        let seq = self.length;
        let broken = |check, why: String| Broken {
            seq: Some(seq),
            check,
            why,
        };
        let order = (event.get("seq").and_then(Value::as_u64) != Some(seq)).then(|| {
            let said = event.get("seq").unwrap_or(&Value::Null);
            broken(
                "order",
                format!("event {seq} of the log says it is `seq` {said}"),
            )
        });
        let link = match event.get(PREV) {
            Some(prev) if prev.as_str() != Some(self.head.as_str()) => Some(broken(
                "chain",
                format!(
                    "its `prev` is not the chain hash of {}: an event before it was removed, \
                     reordered or altered",
                    if seq == 1 {
                        "the empty log".to_owned()
                    } else {
                        format!("event {}", seq - 1)
                    }
                ),
            )),
            None if self.chained_from.is_some() => Some(broken(
                "chain",
                "it carries no `prev`, after the chain began".to_owned(),
            )),
            _ => None,
        };
        if event.get(PREV).is_some() {
            self.chained_from.get_or_insert(seq);
        }
        let body = chain::body_digest(event);
        let linked = (body.as_ref())
            .map_err(String::clone)
            .and_then(|body| chain::link(&self.head, body));
        self.head = linked.unwrap_or_else(|why| chain::sha256_hex(why.as_bytes()));
        match (order, body, link) {
            (Some(broken), _, _) => Err(broken),
            (None, Err(why), _) => Err(broken("digest", why)),
            (None, Ok(_), Some(broken)) => Err(broken),
            (None, Ok(_), None) => Ok(()),
        }
    }

    fn summary(self) -> ChainSummary {
        ChainSummary {
            length: self.length,
            head: self.head,
            chained_from: self.chained_from,
        }
    }
}

/// What a record proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The chain it holds.
    pub chain: ChainSummary,
    /// How many events the reader saw only as digests.
    pub redacted: usize,
    /// The key that made the engine's signature, when there is one and a key was given.
    pub engine_key: Option<String>,
    /// The record holds an engine signature that no key was given to check.
    pub engine_signature_unchecked: bool,
    /// The template source was there and matches the revision.
    pub template_checked: bool,
    /// How many messages carried their sender's signature, each checked against the
    /// sender's keys in the record.
    pub signed_messages: usize,
}

/// Why a record does not verify: which event (if one) and which check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    /// The event's `seq`, when one event is at fault.
    pub seq: Option<u64>,
    /// The check: `format`, `order`, `digest`, `chain`, `summary`, `start`, `template`,
    /// `engine signature`.
    pub check: &'static str,
    /// What is wrong, in words.
    pub why: String,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.seq {
            Some(seq) => write!(f, "event {seq}: {} check failed: {}", self.check, self.why),
            None => write!(f, "{} check failed: {}", self.check, self.why),
        }
    }
}

impl std::error::Error for Broken {}

/// Checks `record`: its chain, event by event; that its summary is that chain; that the
/// log starts with the conversation and revision the record names; the template source
/// against the revision, when the record holds it; and the engine's signature with `keys`
/// (an engine signature by a key not in `keys` fails; with no keys at all it is reported
/// unchecked).
pub fn verify(record: &AuditRecord, keys: &KeySet) -> Result<Verified, Broken> {
    let whole = |check, why: String| Broken {
        seq: None,
        check,
        why,
    };
    if record.format != FORMAT {
        return Err(whole(
            "format",
            format!("`{}` is not `{FORMAT}`", record.format),
        ));
    }
    let chain = chain_of(&record.events)?;
    if chain != record.chain {
        return Err(whole(
            "summary",
            format!(
                "the record says its chain is {} events to head {}, the events make {} to {}",
                record.chain.length, record.chain.head, chain.length, chain.head
            ),
        ));
    }
    check_start(record)?;
    let signed_messages = check_signatures(record)?;
    let template_checked = check_template(&record.template)?;
    let (engine_key, engine_signature_unchecked) = match &record.engine_signature {
        None => (None, false),
        Some(_) if keys.is_empty() => (None, true),
        Some(signed) => {
            let signature = Signature::parse_detached(&signed.jws)
                .map_err(|why| whole("engine signature", why))?;
            let kid = keys
                .verify(&signature, signed_payload(record).as_bytes())
                .map_err(|why| whole("engine signature", why))?;
            (Some(kid), false)
        }
    };
    Ok(Verified {
        redacted: record
            .events
            .iter()
            .filter(|event| event.get(REDACTED).is_some())
            .count(),
        chain,
        engine_key,
        engine_signature_unchecked,
        template_checked,
        signed_messages,
    })
}

/// Every signed message the record shows in full holds under its sender's keys in
/// `signer_keys`: how many there are.
fn check_signatures(record: &AuditRecord) -> Result<usize, Broken> {
    let mut signed = 0;
    for event in &record.events {
        let Some(message) = event
            .get("message")
            .filter(|m| m.get("signature").is_some())
        else {
            continue;
        };
        let seq = event.get("seq").and_then(Value::as_u64);
        let broken = |why: String| Broken {
            seq,
            check: "message signature",
            why,
        };
        let message: Message = serde_json::from_value(message.clone())
            .map_err(|error| broken(format!("not a message: {error}")))?;
        let (Some(fields), Some(signature)) = (
            message.signed_fields(&record.conversation_id),
            &message.signature,
        ) else {
            continue;
        };
        let keys = record
            .signer_keys
            .get(&*message.sender)
            .ok_or_else(|| broken(format!("the record holds no keys of `{}`", message.sender)))
            .and_then(|jwks| KeySet::from_jwks(jwks).map_err(broken))?;
        crate::message::verify(&keys, &fields, &signature.jws).map_err(|why| {
            broken(format!(
                "`{}`'s message {}: {why}",
                message.sender, message.id
            ))
        })?;
        signed += 1;
    }
    Ok(signed)
}

/// The first event, when the reader sees it, names the record's conversation and revision.
fn check_start(record: &AuditRecord) -> Result<(), Broken> {
    let Some(first) = record.events.first() else {
        return Ok(());
    };
    if first.get(REDACTED).is_some() {
        return Ok(());
    }
    let field = |name: &str| first.get(name).and_then(Value::as_str);
    let named = [
        ("id", record.conversation_id.as_str()),
        ("template", record.template.name.as_str()),
        ("revision", record.template.revision.as_str()),
    ];
    for (name, expected) in named {
        if field(name) != Some(expected) {
            return Err(Broken {
                seq: Some(1),
                check: "start",
                why: format!(
                    "the conversation started with {name} {}, the record names `{expected}`",
                    first.get(name).unwrap_or(&Value::Null)
                ),
            });
        }
    }
    Ok(())
}

/// Whether the template's source was there to check; `Err` when it or the digest does not
/// match the revision.
fn check_template(template: &TemplateRecord) -> Result<bool, Broken> {
    let broken = |why: String| Broken {
        seq: None,
        check: "template",
        why,
    };
    let Some(digest) = &template.sha256 else {
        return Ok(false);
    };
    let abbreviated = digest.get(..16).unwrap_or(digest);
    if template.revision != format!("sha256:{abbreviated}") {
        return Err(broken(format!(
            "revision {} is not the abbreviation of sha256 {digest}",
            template.revision
        )));
    }
    let Some(source) = &template.source else {
        return Ok(false);
    };
    let computed = chain::revision_digest(source, template.hook_sha256.as_deref());
    if computed != *digest {
        return Err(broken(format!(
            "the source (and hook module hash) hash to {computed}, not {digest}"
        )));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jws::Signer;

    /// A record of `events` (each given `prev` as the engine writes it), signed by `signer`.
    fn record(mut events: Vec<Value>, signer: Option<&Signer>) -> AuditRecord {
        let source = "kind: Template\n";
        let mut head = GENESIS.to_owned();
        for event in &mut events {
            event[PREV] = json!(head);
            head = chain::link(&head, &chain::body_digest(event).unwrap()).unwrap();
        }
        let digest = chain::revision_digest(source, None);
        let mut record = AuditRecord {
            format: FORMAT.to_owned(),
            conversation_id: "c1".to_owned(),
            reader: None,
            template: TemplateRecord {
                name: "t".to_owned(),
                revision: format!("sha256:{}", &digest[..16]),
                sha256: Some(digest),
                source: Some(source.to_owned()),
                hook_sha256: None,
            },
            chain: chain_of(&events).unwrap(),
            events,
            issued_at: 5,
            signer_keys: BTreeMap::new(),
            engine_signature: None,
        };
        if let Some(signer) = signer {
            let signature = signer
                .sign(signed_payload(&record).as_bytes(), SIGNATURE_TYPE)
                .unwrap();
            record.engine_signature = Some(EngineSignature {
                kid: signer.kid().to_owned(),
                jws: signature.detached(),
            });
        }
        record
    }

    fn log(revision: &str) -> Vec<Value> {
        vec![
            json!({"seq": 1, "at": 1, "type": "started", "id": "c1", "template": "t",
                "revision": revision, "initiator": "a", "participants": ["b"]}),
            json!({"seq": 2, "at": 2, "type": "message_accepted",
                "message": {"id": "m1", "sender": "a", "content": {"x": 1.5}}}),
            json!({"seq": 3, "at": 3, "type": "completed", "outcome": "success"}),
        ]
    }

    fn signer() -> Signer {
        Signer::from_pkcs8(&Signer::generate_ed25519().unwrap(), "engine").unwrap()
    }

    fn keys(signer: &Signer) -> KeySet {
        KeySet::from_jwks(&json!({"keys": [signer.public_jwk()]})).unwrap()
    }

    fn revision() -> String {
        format!(
            "sha256:{}",
            &chain::revision_digest("kind: Template\n", None)[..16]
        )
    }

    #[test]
    fn a_whole_record_verifies_with_the_engine_key() {
        let signer = signer();
        let record = record(log(&revision()), Some(&signer));
        let verified = verify(&record, &keys(&signer)).unwrap();
        assert_eq!(verified.engine_key.as_deref(), Some("engine"));
        assert!(verified.template_checked);
        assert_eq!(verified.chain.length, 3);
        assert_eq!(verified.chain.chained_from, Some(1));
        // Without a key it is consistent, its signature unchecked.
        let unchecked = verify(&record, &KeySet::default()).unwrap();
        assert!(unchecked.engine_signature_unchecked && unchecked.engine_key.is_none());
        // Through JSON and back it still verifies.
        let text = serde_json::to_string(&record).unwrap();
        let again: AuditRecord = serde_json::from_str(&text).unwrap();
        assert!(verify(&again, &keys(&signer)).is_ok());
    }

    #[test]
    fn an_altered_removed_or_reordered_event_names_the_event_and_the_check() {
        let signer = signer();
        let keys = keys(&signer);
        let good = record(log(&revision()), Some(&signer));

        let mut altered = good.clone();
        altered.events[1]["message"]["content"]["x"] = json!(2.5);
        let broken = verify(&altered, &keys).unwrap_err();
        assert_eq!((broken.seq, broken.check), (Some(3), "chain"), "{broken}");

        let mut removed = good.clone();
        removed.events.remove(1);
        removed.events[1]["seq"] = json!(2);
        assert_eq!(verify(&removed, &keys).unwrap_err().seq, Some(2));

        let mut reordered = good.clone();
        reordered.events.swap(1, 2);
        let broken = verify(&reordered, &keys).unwrap_err();
        assert_eq!((broken.seq, broken.check), (Some(2), "order"));

        // The last event altered: no later `prev` catches it, the summary and signature do.
        let mut last = good.clone();
        last.events[2]["outcome"] = json!("failure");
        assert_eq!(verify(&last, &keys).unwrap_err().check, "summary");
        let mut resummed = last.clone();
        resummed.chain = chain_of(&resummed.events).unwrap();
        assert_eq!(
            verify(&resummed, &keys).unwrap_err().check,
            "engine signature"
        );

        let mut other_template = good.clone();
        other_template.template.source = Some("kind: Other\n".to_owned());
        assert_eq!(
            verify(&other_template, &keys).unwrap_err().check,
            "template"
        );

        let stranger = super::tests::signer();
        let mut forged = record(log(&revision()), Some(&stranger));
        forged.engine_signature.as_mut().unwrap().kid = "engine".to_owned();
        assert_eq!(
            verify(&forged, &keys).unwrap_err().check,
            "engine signature"
        );
    }

    #[test]
    fn a_readers_record_verifies_with_redacted_events_and_transitions() {
        let mut events = log(&revision());
        events[1]["transitions"] = json!([{"participant": "b", "from": "x", "to": "y"},
                                          {"participant": "c", "from": "x", "to": "z"}]);
        let whole = record(events, None);
        let mut seen = whole.clone();
        seen.reader = Some("b".to_owned());
        let hidden = chain::transition_digest(&seen.events[1]["transitions"][1]).unwrap();
        seen.events[1]["transitions"][1] = json!({"redacted": hidden});
        let body = chain::body_digest(&seen.events[2]).unwrap();
        seen.events[2] = json!({"seq": 3, "prev": seen.events[2]["prev"], "redacted": body});
        let verified = verify(&seen, &KeySet::default()).unwrap();
        assert_eq!((verified.redacted, verified.chain), (1, whole.chain));
    }

    #[test]
    fn a_log_recorded_before_chains_is_covered_from_its_first_chained_event() {
        let mut events = log(&revision());
        let summary = chain_of(&events[..2]).unwrap();
        assert_eq!(summary.chained_from, None);
        events[2][PREV] = json!(summary.head);
        let chain = chain_of(&events).unwrap();
        assert_eq!(chain.chained_from, Some(3));
        // Once chained, an event without `prev` breaks it.
        let mut unchained = events.clone();
        unchained.push(json!({"seq": 4, "at": 4, "type": "retry_fired", "attempt": 1}));
        assert_eq!(chain_of(&unchained).unwrap_err().seq, Some(4));
    }
}
