//! `colloquy demo`: the built-in protocols played by simulated agents in-process, each
//! conversation printed as a transcript drawn from the engine's event log.
//!
//! The agents talk through the library API only ([`Engine::start`], [`Engine::send`],
//! [`Engine::view`]); decisions such as "accept the cheapest proposal" are taken from what the
//! engine recorded, as a real agent would read its inbox. Each scenario states the outcome it
//! expects, and the demo fails when a conversation ends differently.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use colloquy_engine::store::MemoryStore;
use colloquy_engine::{Engine, EngineConfig, SystemClock};
use colloquy_policy::{Catalog, TemplateCompiler};
use colloquy_protocol::conversation::{CommitmentState, ConversationView, Outcome};
use colloquy_protocol::message::{ENGINE_PARTY, SendMessage, StartConversation};
use serde_json::json;

use crate::transcript;

/// How long the contract-net contractors have to propose. Long enough for the in-process
/// proposals to arrive, short enough that the demo finishes well within two seconds.
const CFP_WINDOW_MS: u64 = 300;
/// Margin past the cfp's reply-by before the scheduler pass, so the deadline has surely passed.
const DEADLINE_MARGIN_MS: u64 = 20;

/// What one scenario produced: its conversation and whether it ended as expected.
struct Played {
    title: &'static str,
    expected: Outcome,
    view: ConversationView,
    /// Expectations the conversation did not meet, beyond its outcome.
    problems: Vec<String>,
}

/// Compiles the templates in `templates`, plays every scenario and writes the transcripts,
/// `width` columns wide, to `out`. Fails when a conversation did not end as expected.
pub async fn run(templates: &Path, width: usize, out: &mut dyn Write) -> anyhow::Result<()> {
    let compiled = TemplateCompiler::new()
        .compile_dir(templates)
        .map_err(|diagnostics| anyhow::anyhow!("{diagnostics}"))
        .with_context(|| format!("compiling the templates in {}", templates.display()))?;
    writeln!(
        out,
        "Colloquy demo: the built-in protocols, played in-process."
    )?;
    for template in &compiled {
        writeln!(out, "  {:<20} {}", template.name, template.revision)?;
    }
    writeln!(out)?;
    let catalog = Catalog::new(compiled.into_iter().map(Arc::new));
    let engine = Engine::new(
        Arc::new(catalog),
        Arc::new(MemoryStore::new()),
        Arc::new(SystemClock),
        EngineConfig::default(),
    );

    let mut played = Vec::new();
    for (scenario, intro) in [
        (
            Scenario::Request,
            "alice asks bob to book a room; bob agrees, then informs.",
        ),
        (
            Scenario::Query,
            "carol asks dave for a price; dave answers at once, without agreeing.",
        ),
        (
            Scenario::ContractNet,
            "buyer calls three contractors; two propose, initech proposes too late; the \
             cheapest wins.",
        ),
    ] {
        let play = match scenario {
            Scenario::Request => request(&engine).await,
            Scenario::Query => query(&engine).await,
            Scenario::ContractNet => contract_net(&engine).await,
        };
        let play = play.with_context(|| format!("playing {}", scenario.template()))?;
        let events = engine.events(&play.view.id, None, 0).await?;
        let number = format!("{}. ", played.len() + 1);
        for (i, line) in transcript::wrap(intro, width.saturating_sub(number.len()))
            .iter()
            .enumerate()
        {
            let lead = if i == 0 { number.as_str() } else { "   " };
            writeln!(out, "{lead}{line}")?;
        }
        writeln!(out)?;
        write!(out, "{}", transcript::render(&play.view, &events, width))?;
        writeln!(out)?;
        played.push(play);
    }

    let mut failed = Vec::new();
    for play in &played {
        let ended = play.view.outcome.map_or("no outcome", Outcome::name);
        let ok = play.view.outcome == Some(play.expected) && play.problems.is_empty();
        let mark = if ok { "ok  " } else { "FAIL" };
        writeln!(
            out,
            "{mark} {:<20} {ended} (expected {})",
            play.title,
            play.expected.name()
        )?;
        for problem in &play.problems {
            writeln!(out, "       {problem}")?;
        }
        if !ok {
            failed.push(play.title);
        }
    }
    if !failed.is_empty() {
        bail!(
            "conversations did not end as expected: {}",
            failed.join(", ")
        );
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Scenario {
    Request,
    Query,
    ContractNet,
}

impl Scenario {
    fn template(self) -> &'static str {
        match self {
            Scenario::Request => "fipa-request",
            Scenario::Query => "fipa-query",
            Scenario::ContractNet => "fipa-contract-net",
        }
    }
}

fn start(template: &str, participants: &[&str], opening: SendMessage) -> StartConversation {
    StartConversation {
        template: template.to_owned(),
        participants: participants.iter().map(|p| (*p).to_owned()).collect(),
        message: Some(opening),
        ..StartConversation::default()
    }
}

/// FIPA Request: request → agree → inform.
async fn request(engine: &Engine) -> anyhow::Result<Played> {
    let opening = SendMessage::new(
        "request",
        json!({"action": "book-room", "room": "Lovelace", "slot": "Tue 10:00-11:00"}),
    );
    let started = engine
        .start("alice", start("fipa-request", &["bob"], opening))
        .await?;
    let id = started.id.clone();
    engine
        .send(&id, "bob", SendMessage::new("agree", json!({})))
        .await?;
    engine
        .send(
            &id,
            "bob",
            SendMessage::new("inform", json!({"done": true, "booking": "LV-0412"})),
        )
        .await?;
    let view = engine.view(&id, None).await?;
    let mut problems = Vec::new();
    expect_commitments(&view, &[("bob", CommitmentState::Fulfilled)], &mut problems);
    Ok(Played {
        title: "fipa-request",
        expected: Outcome::Success,
        view,
        problems,
    })
}

/// FIPA Query: query-ref answered by an inform, agree skipped.
async fn query(engine: &Engine) -> anyhow::Result<Played> {
    let opening = SendMessage::new("query-ref", json!({"ref": "price of 40 oak chairs"}));
    let started = engine
        .start("carol", start("fipa-query", &["dave"], opening))
        .await?;
    let id = started.id.clone();
    engine
        .send(
            &id,
            "dave",
            SendMessage::new("inform", json!({"value": {"eur": 3160}})),
        )
        .await?;
    let view = engine.view(&id, None).await?;
    let mut problems = Vec::new();
    let performatives: Vec<String> = view
        .messages
        .iter()
        .map(|m| m.performative.to_string())
        .collect();
    if performatives != ["query-ref", "inform"] {
        problems.push(format!(
            "expected query-ref then inform, got {performatives:?}"
        ));
    }
    Ok(Played {
        title: "fipa-query",
        expected: Outcome::Success,
        view,
        problems,
    })
}

/// FIPA Contract Net with three contractors: two proposals in time, one silence that turns
/// into a late proposal, an award to the cheapest and a rejection for the other.
async fn contract_net(engine: &Engine) -> anyhow::Result<Played> {
    let reply_by = engine.now() + CFP_WINDOW_MS;
    let cfp = SendMessage::new(
        "cfp",
        json!({"task": "deliver 40 oak chairs", "by": "Friday"}),
    )
    .reply_by(reply_by);
    let participants = ["acme", "globex", "initech"];
    let started = engine
        .start("buyer", start("fipa-contract-net", &participants, cfp))
        .await?;
    let id = started.id.clone();
    engine
        .send(
            &id,
            "acme",
            SendMessage::new("propose", json!({"price": 120})),
        )
        .await?;
    engine
        .send(
            &id,
            "globex",
            SendMessage::new("propose", json!({"price": 95})),
        )
        .await?;

    // initech stays silent past the reply-by; the scheduler pass ends its thread.
    let wait = reply_by.saturating_sub(engine.now()) + DEADLINE_MARGIN_MS;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    engine.run_due().await?;
    engine
        .send(
            &id,
            "initech",
            SendMessage::new("propose", json!({"price": 80})),
        )
        .await?;

    // The buyer decides from the engine's record: proposals on threads still open.
    let view = engine.view(&id, None).await?;
    let mut offers: Vec<(&str, f64, serde_json::Value)> = view
        .messages
        .iter()
        .filter(|m| m.performative.to_string() == "propose")
        .filter(|m| {
            view.threads
                .iter()
                .any(|t| t.participant == m.sender && &*t.state == "proposed")
        })
        .filter_map(|m| {
            let price = m.content.get("price")?;
            Some((&*m.sender, price.as_f64()?, price.clone()))
        })
        .collect();
    offers.sort_by(|a, b| a.1.total_cmp(&b.1));
    let Some(((winner, _, price), losers)) = offers.split_first() else {
        bail!("no proposal to accept");
    };
    let (winner, price) = ((*winner).to_owned(), price.clone());
    let losers: Vec<String> = losers
        .iter()
        .map(|(agent, _, _)| (*agent).to_owned())
        .collect();
    engine
        .send(
            &id,
            "buyer",
            SendMessage::new("accept-proposal", json!({"price": price})).to([winner.as_str()]),
        )
        .await?;
    if !losers.is_empty() {
        let reject = SendMessage::new("reject-proposal", json!({"reason": "a cheaper offer won"}));
        engine.send(&id, "buyer", reject.to(losers)).await?;
    }
    engine
        .send(
            &id,
            &winner,
            SendMessage::new("inform", json!({"done": true, "delivered": 40})),
        )
        .await?;

    let view = engine.view(&id, None).await?;
    let mut problems = Vec::new();
    if winner != "globex" {
        problems.push(format!(
            "expected globex (the cheapest in time) to win, not {winner}"
        ));
    }
    for (participant, state) in [
        ("acme", "rejected"),
        ("globex", "done"),
        ("initech", "no_reply"),
    ] {
        match view.threads.iter().find(|t| &*t.participant == participant) {
            Some(thread) if &*thread.state == state => {}
            Some(thread) => problems.push(format!(
                "thread with {participant} ended in {}, expected {state}",
                thread.state
            )),
            None => problems.push(format!("no thread with {participant}")),
        }
    }
    let auto_reject = view.messages.iter().any(|m| {
        &*m.sender == ENGINE_PARTY
            && m.performative.to_string() == "reject-proposal"
            && m.receivers.iter().any(|r| &**r == "initech")
    });
    if !auto_reject {
        problems.push("the late proposal got no automatic reject-proposal".to_owned());
    }
    expect_commitments(
        &view,
        &[
            ("acme", CommitmentState::Released),
            ("globex", CommitmentState::Fulfilled),
        ],
        &mut problems,
    );
    Ok(Played {
        title: "fipa-contract-net",
        expected: Outcome::Success,
        view,
        problems,
    })
}

/// Checks the conversation holds exactly these commitments, by debtor and final state.
fn expect_commitments(
    view: &ConversationView,
    expected: &[(&str, CommitmentState)],
    problems: &mut Vec<String>,
) {
    let found: Vec<(&str, CommitmentState)> = view
        .commitments
        .iter()
        .map(|c| (&*c.debtor, c.state))
        .collect();
    if found != expected {
        let show = |list: &[(&str, CommitmentState)]| {
            list.iter()
                .map(|(debtor, state)| format!("{debtor} {}", state.name()))
                .collect::<Vec<_>>()
        };
        problems.push(format!(
            "commitments: expected {:?}, found {:?}",
            show(expected),
            show(&found)
        ));
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn templates() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates")
    }

    #[tokio::test]
    async fn the_demo_plays_every_scenario_to_its_expected_outcome() {
        let mut out = Vec::new();
        let width = usize::from(transcript::DEFAULT_WIDTH);
        let result = run(&templates(), width, &mut out).await;
        let out = String::from_utf8(out).expect("transcripts are UTF-8");
        assert!(result.is_ok(), "{result:?}\n{out}");
        for title in ["fipa-request", "fipa-query", "fipa-contract-net"] {
            assert!(
                out.contains(&format!("ok   {title}")),
                "{title} not ok:\n{out}"
            );
        }
        assert!(out.contains("reject-proposal {reason: \"late\"}"), "{out}");
        let widest = out
            .lines()
            .map(|line| line.chars().count())
            .max()
            .unwrap_or(0);
        assert!(widest <= width, "a line is {widest} columns wide:\n{out}");
    }

    #[tokio::test]
    async fn the_demo_fails_without_templates() {
        let mut out = Vec::new();
        let missing = templates().join("does-not-exist");
        assert!(run(&missing, 100, &mut out).await.is_err());
    }
}
