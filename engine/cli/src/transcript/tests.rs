//! Tests of `transcript`.

use std::sync::Arc;

use colloquy_protocol::conversation::{CommitmentView, ConversationStatus, Outcome, Violation};
use colloquy_protocol::event::Started;
use colloquy_protocol::performative::Performative;
use serde_json::json;

use super::*;

const T0: u64 = 1_767_225_600_000;

fn event(seq: u64, at: u64, kind: EventKind) -> ConversationEvent {
    ConversationEvent {
        seq,
        at: T0 + at,
        prev: None,
        kind,
    }
}

fn message(
    id: &str,
    performative: &str,
    sender: &str,
    receivers: &[&str],
    content: Value,
) -> Arc<Message> {
    Arc::new(Message {
        id: Arc::from(id),
        performative: Performative::parse(performative).expect("a FIPA act"),
        sender: Arc::from(sender),
        receivers: receivers.iter().map(|r| Arc::from(*r)).collect(),
        content: content.into(),
        in_reply_to: None,
        reply_by: None,
        sent_at: T0,
        signature: None,
    })
}

fn moved(participant: &str, from: &str, to: &str, outcome: Option<Outcome>) -> ThreadTransition {
    ThreadTransition {
        participant: Arc::from(participant),
        from: Arc::from(from),
        to: Arc::from(to),
        outcome,
        deadline: None,
    }
}

fn view(
    participants: &[&str],
    threads: Vec<ThreadView>,
    outcome: Option<Outcome>,
) -> ConversationView {
    ConversationView {
        id: Arc::from("c1"),
        template: Arc::from("fipa-request"),
        revision: Arc::from("sha256:0123456789abcdef"),
        initiator: Arc::from("alice"),
        participants: participants.iter().map(|p| Arc::from(*p)).collect(),
        status: if outcome.is_some() {
            ConversationStatus::Completed
        } else {
            ConversationStatus::Active
        },
        outcome,
        threads,
        vars: json!({}),
        parameters: json!({}),
        context: Value::Null,
        deadline: None,
        messages: Vec::new(),
        commitments: Vec::new(),
        violations: Vec::new(),
        version: 0,
    }
}

fn started(participants: &[&str]) -> EventKind {
    // `.into()`: the event variants box their larger payloads.
    EventKind::Started(
        Started {
            id: Arc::from("c1"),
            template: Arc::from("fipa-request"),
            revision: Arc::from("sha256:0123456789abcdef"),
            initiator: Arc::from("alice"),
            participants: participants.iter().map(|p| Arc::from(*p)).collect(),
            parameters: json!({}),
            context: Value::Null,
            deadline: None,
            trace: None,
        }
        .into(),
    )
}

#[test]
fn a_request_conversation_is_drawn_from_its_events() {
    let commitment = CommitmentView {
        id: Arc::from("c1/1"),
        conversation_id: Arc::from("c1"),
        name: Arc::from("perform-action"),
        debtor: Arc::from("bob"),
        creditor: Arc::from("alice"),
        state: CommitmentState::Pending,
        deadline: None,
        created_by: Arc::from("m1"),
    };
    let events = vec![
        event(1, 0, started(&["bob"])),
        event(
            2,
            0,
            EventKind::MessageAccepted {
                message: message(
                    "m1",
                    "request",
                    "alice",
                    &["bob"],
                    json!({"action": "book"}),
                ),
                transitions: vec![moved("bob", "start", "requested", None)],
            },
        ),
        event(
            3,
            0,
            EventKind::CommitmentCreated(commitment.clone().into()),
        ),
        event(
            4,
            1500,
            EventKind::MessageAccepted {
                message: message("m2", "inform", "bob", &["alice"], json!({"done": true})),
                transitions: vec![moved("bob", "requested", "done", Some(Outcome::Success))],
            },
        ),
        event(
            5,
            1500,
            EventKind::CommitmentMoved {
                id: Arc::from("c1/1"),
                to: CommitmentState::Fulfilled,
                deadline: None,
                cause: Arc::from("m2"),
            },
        ),
        event(
            6,
            1500,
            EventKind::Completed {
                outcome: Outcome::Success,
                reason: None,
            },
        ),
    ];
    let thread = ThreadView {
        participant: Arc::from("bob"),
        state: Arc::from("done"),
        outcome: Some(Outcome::Success),
        deadline: None,
    };
    let mut view = view(&["bob"], vec![thread], Some(Outcome::Success));
    view.commitments = vec![CommitmentView {
        state: CommitmentState::Fulfilled,
        ..commitment
    }];

    let expected = "\
── fipa-request ────────────────────────────────────────────────────────────────────────────────────
   conversation c1 · revision sha256:0123456789abcdef

         alice            bob
           ┬               ┬
   +0ms    │               │  started by alice with bob
           ├──────────────►│  request {action: \"book\"}
           │               ●  bob: start → requested
           │               ◆  perform-action #1: pending (bob owes alice)
  +1.5s    │◄──────────────┤  inform {done: true}
           │               ●  bob: requested → done (success)
           │               ◆  perform-action #1: pending → fulfilled
           ■               │  conversation completed: success
           ┴               ┴

  outcome       success · completed after 1.5s
  threads       bob done (success)
  commitments   perform-action #1 bob→alice fulfilled
  violations    none
";
    assert_eq!(render(&view, &events, usize::from(DEFAULT_WIDTH)), expected);
}

#[test]
fn broadcasts_late_replies_and_long_text_stay_within_the_width() {
    let contractors = ["acme", "globex", "initech"];
    let mut late = (*message(
        "m3",
        "reject-proposal",
        ENGINE_PARTY,
        &["initech"],
        json!({"reason": "late"}),
    ))
    .clone();
    late.in_reply_to = Some(Arc::from("m2"));
    let long = "a task description long enough to need several continuation rows ".repeat(3);
    let events = vec![
        event(1, 0, started(&contractors)),
        event(
            2,
            0,
            EventKind::MessageAccepted {
                message: message("m1", "cfp", "alice", &contractors, json!({"task": long})),
                transitions: contractors
                    .iter()
                    .map(|c| moved(c, "start", "called", None))
                    .collect(),
            },
        ),
        event(
            3,
            400,
            EventKind::ThreadExpired(
                moved("initech", "called", "no_reply", Some(Outcome::NoReply)).into(),
            ),
        ),
        event(
            4,
            450,
            EventKind::MessageAccepted {
                message: message("m2", "propose", "initech", &["alice"], json!({"price": 80})),
                transitions: Vec::new(),
            },
        ),
        event(
            5,
            450,
            EventKind::ViolationRecorded(
                Violation {
                    kind: ViolationKind::LateMessage,
                    agent: Some(Arc::from("initech")),
                    message_id: Some(Arc::from("m2")),
                    detail: "late".to_owned(),
                    at: T0 + 450,
                }
                .into(),
            ),
        ),
        event(
            6,
            450,
            EventKind::MessageAccepted {
                message: Arc::new(late),
                transitions: Vec::new(),
            },
        ),
        event(
            7,
            500,
            EventKind::MessageRefused(
                colloquy_protocol::event::Refusal {
                    message_id: Some(Arc::from("g1")),
                    sender: Arc::from("globex"),
                    performative: "inform".to_owned(),
                    to: Vec::new(),
                    code: "out_of_protocol".to_owned(),
                    pointer: None,
                }
                .into(),
            ),
        ),
    ];
    let view = view(&contractors, Vec::new(), None);
    let width = 72;
    let out = render(&view, &events, width);
    for line in out.lines() {
        assert!(
            line.chars().count() <= width,
            "{} columns: {line}\n{out}",
            line.chars().count()
        );
    }
    let lines: Vec<&str> = out.lines().collect();
    let find = |needle: &str| {
        lines
            .iter()
            .copied()
            .find(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no `{needle}` in\n{out}"))
    };
    // The cfp reaches all three: one arrow with a head at each contractor's lifeline.
    let cfp = find(" cfp {task:");
    assert_eq!(cfp.matches('►').count(), 3, "{cfp}");
    assert!(
        cfp.contains('├') && cfp.contains("►┼") && cfp.contains("►│"),
        "{cfp}"
    );
    // One note for the three identical moves, marking each thread.
    assert_eq!(find("acme, globex, initech:").matches('●').count(), 3);
    assert!(
        find("initech: called → no_reply")
            .trim_start()
            .starts_with("+400ms")
    );
    assert!(find("violation late_message").contains('×'));
    // A refusal is no arrow: a mark on its sender's lifeline.
    // (At this width its note wraps: the code goes on the next row.)
    let refused = find("refused inform:");
    assert_eq!(refused.matches('⊘').count(), 1, "{refused}");
    let at = lines
        .iter()
        .position(|line| *line == refused)
        .expect("found");
    assert!(
        lines[at..=at + 1].join(" ").contains("out_of_protocol"),
        "{out}"
    );
    assert!(
        !refused.contains('►') && !refused.contains('◄'),
        "{refused}"
    );
    // The engine gets its own column, at the right, and answers leftwards.
    assert!(
        lines.iter().any(|line| line.trim_end().ends_with("engine")),
        "{out}"
    );
    let reply = find("reject-proposal {reason:");
    assert!(reply.contains("│◄") && reply.contains('┤'), "{reply}");
    assert!(out.contains("outcome       none yet"), "{out}");
}

#[test]
fn durations_read_naturally() {
    let cases = [
        (0, "0ms"),
        (999, "999ms"),
        (1000, "1s"),
        (1500, "1.5s"),
        (1250, "1.25s"),
        (60_000, "1m"),
        (150_000, "2m30s"),
        (3_600_000, "1h"),
        (5_400_000, "1h30m"),
    ];
    for (ms, text) in cases {
        assert_eq!(duration(ms), text, "{ms} ms");
    }
}

#[test]
fn wrapping_splits_words_longer_than_a_line() {
    assert_eq!(wrap("ab cd ef", 5), ["ab cd", "ef"]);
    assert_eq!(wrap("abcdefgh ij", 3), ["abc", "def", "gh", "ij"]);
    assert_eq!(wrap("", 5), [""]);
}
