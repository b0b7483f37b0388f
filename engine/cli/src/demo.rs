//! `colloquy demo`: the built-in protocols played by simulated agents over HTTP, each
//! conversation printed as a transcript drawn from the engine's event log.
//!
//! The demo starts a server in-process on `127.0.0.1:0` (memory store, an agents file with a
//! token per agent) and runs every agent as an SDK client: initiators use the SDK's
//! `request`, `query` and `call_for_proposals` helpers, participants answer from handlers
//! running over their inbox streams. One participant is no SDK client but a remote agent
//! that speaks A2A on a port of its own (`a2a_agent`), which the engine talks to. Decisions such as "accept the cheapest proposal" are taken from what the
//! server reported, as a real agent would. Each scenario states the outcome it expects, and
//! the demo fails when a conversation ends differently.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use colloquy_hooks::{HookRuntime, HookRuntimeConfig};
use colloquy_policy::{Catalog, TemplateCompiler};
use colloquy_protocol::conversation::{CommitmentState, ConversationView, Outcome};
use colloquy_protocol::event::{ConversationEvent, EventKind};
use colloquy_protocol::message::ENGINE_PARTY;
use colloquy_sdk::ask::now_ms;
use colloquy_sdk::{AskOptions, Client, Handlers};
use colloquy_server::{self as api, Identity, RunningService, ServiceOptions};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::{a2a_agent, transcript};

/// How long the contract-net contractors have to propose. Long enough for the proposals
/// over loopback HTTP, short enough that the demo finishes well within two seconds.
const CFP_WINDOW_MS: u64 = 300;
/// The credit-assessment example, played once per build of its hook when that build exists:
/// the template (relative to the templates dir), its name, the language of its hook and
/// the hook's form. The transcripts say which language decided.
const CREDIT_BUILDS: [CreditBuild; 2] = [
    CreditBuild {
        file: "examples/credit-assessment/credit-assessment.yaml",
        name: "credit-assessment",
        language: "Rust",
        form: "a core wasm module",
    },
    CreditBuild {
        file: "examples/credit-assessment/credit-assessment-js.yaml",
        name: "credit-assessment-js",
        language: "TypeScript",
        form: "a wasm component",
    },
];

/// One build of the credit-assessment hook (see [`CREDIT_BUILDS`]).
#[derive(Clone, Copy)]
struct CreditBuild {
    file: &'static str,
    name: &'static str,
    language: &'static str,
    form: &'static str,
}
/// How late initech proposes: past the reply-by plus a few scheduler periods, so the engine
/// has surely closed its thread.
const LATE_BY_MS: u64 = 200;
/// Longest any one step of a scenario may take before the demo gives up on it.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// The agents that call the service, each with the token `<id>-demo-token`.
const AGENTS: &[&str] = &[
    "alice",
    "bob",
    "carol",
    "dave",
    "buyer",
    "acme",
    "globex",
    "initech",
    "loan-desk",
    "risk-desk",
    "emma",
];
/// The remote A2A agent, reached through its `a2a` endpoint.
const TRANSLATOR: &str = "translator";

/// The agents file: a token per agent in [`AGENTS`], and the translator at `a2a_url`.
fn identity(a2a_url: &str) -> anyhow::Result<Identity> {
    let mut yaml = String::from("agents:\n");
    for agent in AGENTS {
        yaml.push_str(&format!("  - {{id: {agent}, token: {agent}-demo-token}}\n"));
    }
    yaml.push_str(&format!("  - {{id: {TRANSLATOR}, a2a: \"{a2a_url}\"}}\n"));
    Ok(Identity::from_yaml(&yaml, "the demo's agents")?)
}

/// An SDK client for `agent`, with its token.
async fn connect(url: &str, agent: &str) -> anyhow::Result<Client> {
    let token = format!("{agent}-demo-token");
    Ok(Client::connect(url, agent, Some(&token)).await?)
}

/// What one scenario produced: its conversation and whether it ended as expected.
struct Played {
    title: &'static str,
    expected: Outcome,
    view: ConversationView,
    events: Vec<ConversationEvent>,
    /// Expectations the conversation did not meet, beyond its outcome.
    problems: Vec<String>,
}

/// Compiles the templates in `templates`, serves them on a loopback port, plays every
/// scenario with SDK agents and writes the transcripts, `width` columns wide, to `out`.
/// Fails when a conversation did not end as expected.
pub async fn run(templates: &Path, width: usize, out: &mut dyn Write) -> anyhow::Result<()> {
    let compiled = TemplateCompiler::new()
        .compile_dir(templates)
        .map_err(|diagnostics| anyhow::anyhow!("{diagnostics}"))
        .with_context(|| format!("compiling the templates in {}", templates.display()))?;
    let names: Vec<(String, String)> = compiled
        .iter()
        .map(|t| (t.name.to_string(), t.revision.to_string()))
        .collect();
    // The credit-assessment example runs wasm hooks; each build plays when its hook has
    // been built from source (templates/examples/build.sh).
    let mut credit = Vec::new();
    let mut builds = Vec::new();
    for build in CREDIT_BUILDS {
        match TemplateCompiler::new().compile_file(&templates.join(build.file)) {
            Ok(template) => {
                credit.push(template);
                builds.push(build);
            }
            Err(diagnostics) => {
                tracing::info!(%diagnostics, template = build.name, "hook example not loaded");
                writeln!(
                    out,
                    "note: the {} hook of {} is not built; run templates/examples/build.sh",
                    build.language, build.name
                )?;
            }
        }
    }
    let mut names = names;
    names.extend(
        credit
            .iter()
            .map(|t| (t.name.to_string(), t.revision.to_string())),
    );
    let hooks =
        HookRuntime::new(HookRuntimeConfig::default()).context("starting the wasm hook runtime")?;
    let (translator_url, translator) = a2a_agent::start().await?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let catalog = Catalog::new(compiled.into_iter().chain(credit).map(std::sync::Arc::new));
    let options = ServiceOptions {
        identity: identity(&translator_url)?,
        hooks: Some(std::sync::Arc::new(hooks)),
        ..ServiceOptions::default()
    };
    let service = api::launch(catalog, listener, options)?;
    writeln!(
        out,
        "Colloquy demo: SDK agents and a remote A2A agent over HTTP ({}).",
        service.url()
    )?;
    for (name, revision) in &names {
        writeln!(out, "  {name:<20} {revision}")?;
    }
    // The demo's agents have well-known tokens (`<agent>-demo-token`), so naming the pattern
    // gives nothing away; the tokens themselves are never part of the URL.
    writeln!(
        out,
        "Inspector, while the demo runs: {}/inspect\n  (sign in with an agent's token, \
         e.g. alice-demo-token)",
        service.url()
    )?;
    writeln!(out)?;

    let participants = Participants::start(&service).await?;
    let result = play_all(&service, width, &builds, out).await;
    participants.stop();
    translator.abort();
    // Streams end and requests drain; a failure here changes nothing the demo showed.
    if let Err(error) = service.shutdown().await {
        tracing::warn!(%error, "demo server did not shut down cleanly");
    }
    result
}

async fn play_all(
    service: &RunningService,
    width: usize,
    credit: &[CreditBuild],
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let url = service.url();
    let mut played = Vec::new();
    let credit = credit.iter().map(|build| {
        (
            Scenario::Credit(*build),
            format!(
                "loan-desk asks risk-desk to assess a loan for crypto mining rigs; the hook, \
                 written in {} and built into {}, marks it pending and routes it to \
                 special-risk-assessment.",
                build.language, build.form
            ),
        )
    });
    let scenarios = [
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
        (
            Scenario::A2a,
            "emma asks translator, a remote agent that speaks A2A, to translate; the engine \
             sends it an A2A message/send and records its completed task as its inform.",
        ),
    ]
    .map(|(scenario, intro)| (scenario, intro.to_owned()));
    for (scenario, intro) in scenarios.into_iter().chain(credit) {
        let play = match scenario {
            Scenario::Request => request(&url).await,
            Scenario::Query => query(&url).await,
            Scenario::ContractNet => contract_net(&url).await,
            Scenario::A2a => a2a_request(&url).await,
            Scenario::Credit(build) => credit_assessment(&url, build.name).await,
        };
        let play = play.with_context(|| format!("playing {}", scenario.template()))?;
        let number = format!("{}. ", played.len() + 1);
        for (i, line) in transcript::wrap(&intro, width.saturating_sub(number.len()))
            .iter()
            .enumerate()
        {
            let lead = if i == 0 { number.as_str() } else { "   " };
            writeln!(out, "{lead}{line}")?;
        }
        writeln!(out)?;
        write!(
            out,
            "{}",
            transcript::render(&play.view, &play.events, width)
        )?;
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
    A2a,
    Credit(CreditBuild),
}

impl Scenario {
    fn template(self) -> &'static str {
        match self {
            Scenario::Request => "fipa-request",
            Scenario::Query => "fipa-query",
            Scenario::ContractNet => "fipa-contract-net",
            Scenario::A2a => "fipa-request",
            Scenario::Credit(build) => build.name,
        }
    }
}

/// The participant agents, each serving its inbox in a task of its own.
struct Participants(Vec<JoinHandle<()>>);

impl Participants {
    async fn start(service: &RunningService) -> anyhow::Result<Participants> {
        let url = service.url();
        let mut tasks = Vec::new();
        let mut spawn = |client: Client, handlers: Handlers| {
            tasks.push(tokio::spawn(async move {
                if let Err(error) = client.serve(handlers, 0).await {
                    tracing::error!(agent = client.agent(), %error, "agent stopped");
                }
            }));
        };
        // bob books rooms: agrees first, then reports the booking.
        spawn(
            connect(&url, "bob").await?,
            Handlers::new().on("fipa-request", "request", |msg| async move {
                msg.agree(json!({})).await?;
                msg.inform(json!({"done": true, "booking": "LV-0412"}))
                    .await?;
                Ok(())
            }),
        );
        // risk-desk assesses loans (the hook decides who else sees them).
        spawn(
            connect(&url, "risk-desk").await?,
            CREDIT_BUILDS
                .iter()
                .fold(Handlers::new(), |handlers, build| {
                    handlers.on(build.name, "request", |msg| async move {
                        msg.inform(json!({"score": 640, "decision": "refer"}))
                            .await?;
                        Ok(())
                    })
                }),
        );
        // dave answers price queries at once.
        spawn(
            connect(&url, "dave").await?,
            Handlers::new().on("fipa-query", "query-ref", |msg| async move {
                msg.inform(json!({"value": {"eur": 3160}})).await?;
                Ok(())
            }),
        );
        // Contractors: propose their price; deliver when awarded.
        for (name, price, late) in [
            ("acme", 120, false),
            ("globex", 95, false),
            ("initech", 80, true),
        ] {
            let handlers = Handlers::new()
                .on("fipa-contract-net", "cfp", move |msg| async move {
                    if late {
                        let reply_by = msg.message().reply_by.unwrap_or_else(now_ms);
                        let wait = (reply_by + LATE_BY_MS).saturating_sub(now_ms());
                        tokio::time::sleep(Duration::from_millis(wait)).await;
                    }
                    msg.propose(json!({"price": price})).await?;
                    Ok(())
                })
                .on("fipa-contract-net", "accept-proposal", |msg| async move {
                    msg.inform(json!({"done": true, "delivered": 40})).await?;
                    Ok(())
                });
            spawn(connect(&url, name).await?, handlers);
        }
        Ok(Participants(tasks))
    }

    fn stop(self) {
        self.0.iter().for_each(JoinHandle::abort);
    }
}

/// The conversation's view and whole event log, once it has completed.
async fn finished(
    client: &Client,
    id: &str,
) -> anyhow::Result<(ConversationView, Vec<ConversationEvent>)> {
    let collect = async {
        let mut stream = client.events(id, 0);
        let mut events = Vec::new();
        while let Some(event) = stream.next().await? {
            events.push(event);
        }
        anyhow::Ok(events)
    };
    let events = tokio::time::timeout(STEP_TIMEOUT, collect)
        .await
        .with_context(|| format!("conversation {id} did not complete"))??;
    let view = client.conversation(id).await?;
    Ok((view, events))
}

/// FIPA Request: request → agree → inform.
async fn request(url: &str) -> anyhow::Result<Played> {
    let alice = connect(url, "alice").await?;
    let (seen, mut observed) = tokio::sync::mpsc::unbounded_channel();
    let answer = alice
        .request(
            "bob",
            json!({"action": "book-room", "room": "Lovelace", "slot": "Tue 10:00-11:00"}),
            AskOptions::default().timeout(STEP_TIMEOUT).observe(seen),
        )
        .await?;
    let (view, events) = finished(&alice, &answer.conversation_id).await?;
    let mut problems = Vec::new();
    let mut intermediate = Vec::new();
    while let Ok(message) = observed.try_recv() {
        intermediate.push(message.performative.to_string());
    }
    if intermediate != ["agree", "inform"] {
        problems.push(format!(
            "alice observed {intermediate:?}, expected agree then inform"
        ));
    }
    if answer
        .reply
        .as_ref()
        .map(|m| m.performative.to_string())
        .as_deref()
        != Some("inform")
    {
        problems.push("the request resolved on something other than the inform".to_owned());
    }
    expect_commitments(&view, &[("bob", CommitmentState::Fulfilled)], &mut problems);
    Ok(Played {
        title: "fipa-request",
        expected: Outcome::Success,
        view,
        events,
        problems,
    })
}

/// FIPA Request to a remote A2A agent: the engine sends the request as A2A `message/send`
/// and the translator's completed task comes back as its `inform`.
async fn a2a_request(url: &str) -> anyhow::Result<Played> {
    let emma = connect(url, "emma").await?;
    let answer = emma
        .request(
            TRANSLATOR,
            json!({"action": "translate", "text": "good morning", "to": "de"}),
            AskOptions::default().timeout(STEP_TIMEOUT),
        )
        .await?;
    let (view, events) = finished(&emma, &answer.conversation_id).await?;
    let mut problems = Vec::new();
    let translation = answer
        .reply
        .as_ref()
        .filter(|reply| reply.performative.to_string() == "inform")
        .map(|reply| reply.content.value());
    if translation.as_ref().and_then(|c| c.get("translation")) != Some(&json!("Guten Morgen")) {
        problems.push(format!(
            "expected translator's inform with \"Guten Morgen\", got {translation:?}"
        ));
    }
    Ok(Played {
        title: "a2a-request",
        expected: Outcome::Success,
        view,
        events,
        problems,
    })
}

/// The credit-assessment example on the template `name`: the hook stamps the application
/// pending, lets the amount through (under the template's limit) and routes the crypto
/// purpose to `special-risk-assessment`.
async fn credit_assessment(url: &str, name: &'static str) -> anyhow::Result<Played> {
    let desk = connect(url, "loan-desk").await?;
    let mut options = AskOptions::default().timeout(STEP_TIMEOUT).template(name);
    options.parameters = json!({"applicant_id": "A-1042", "income_source": "salary"});
    let answer = desk
        .request(
            "risk-desk",
            json!({"amount": 20000, "purpose": "Buy crypto mining rigs"}),
            options,
        )
        .await?;
    let (view, events) = finished(&desk, &answer.conversation_id).await?;
    let mut problems = Vec::new();
    let routed = view.messages.first().is_some_and(|request| {
        request
            .receivers
            .iter()
            .any(|agent| &**agent == "special-risk-assessment")
    });
    if !routed {
        problems.push("the request was not routed to special-risk-assessment".to_owned());
    }
    for (var, expected) in [("risk_route", "special"), ("status", "assessed")] {
        if view.vars.get(var).and_then(|v| v.as_str()) != Some(expected) {
            problems.push(format!(
                "vars.{var} is {:?}, expected {expected:?}",
                view.vars.get(var)
            ));
        }
    }
    Ok(Played {
        title: name,
        expected: Outcome::Success,
        view,
        events,
        problems,
    })
}

/// FIPA Query: query-ref answered by an inform, agree skipped.
async fn query(url: &str) -> anyhow::Result<Played> {
    let carol = connect(url, "carol").await?;
    let answer = carol
        .query(
            "dave",
            json!({"ref": "price of 40 oak chairs"}),
            AskOptions::default().timeout(STEP_TIMEOUT),
        )
        .await?;
    let (view, events) = finished(&carol, &answer.conversation_id).await?;
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
        events,
        problems,
    })
}

/// FIPA Contract Net with three contractors: two proposals in time, one silence that turns
/// into a late proposal, an award to the cheapest and a rejection for the other.
async fn contract_net(url: &str) -> anyhow::Result<Played> {
    let buyer = connect(url, "buyer").await?;
    let reply_by = now_ms() + CFP_WINDOW_MS;
    let collected = buyer
        .call_for_proposals(
            &["acme", "globex", "initech"],
            json!({"task": "deliver 40 oak chairs", "by": "Friday"}),
            reply_by,
            AskOptions::default().timeout(STEP_TIMEOUT),
        )
        .await?;
    let id = collected.conversation_id.clone();

    // The buyer decides once the engine has turned initech's late bid away, so the
    // transcript reads the same on every run.
    let mut stream = buyer.events(&id, 0);
    let late_bid_answered = async {
        while let Some(event) = stream.next().await? {
            if let EventKind::MessageAccepted { message, .. } = &event.kind
                && &*message.sender == ENGINE_PARTY
                && message.receivers.iter().any(|r| &**r == "initech")
            {
                return anyhow::Ok(true);
            }
        }
        anyhow::Ok(false)
    };
    let late_answered = tokio::time::timeout(STEP_TIMEOUT, late_bid_answered)
        .await
        .unwrap_or(Ok(false))?;

    let mut offers: Vec<(f64, &colloquy_protocol::Message)> = collected
        .proposals
        .iter()
        .filter_map(|m| Some((m.content.value().get("price")?.as_f64()?, m)))
        .collect();
    offers.sort_by(|a, b| a.0.total_cmp(&b.0));
    let Some(((_, winner), losers)) = offers.split_first() else {
        bail!("no proposal to accept");
    };
    let price = winner.content.value().get("price").cloned();
    buyer.accept(&id, winner, json!({"price": price})).await?;
    for (_, loser) in losers {
        buyer
            .reject(&id, loser, json!({"reason": "a cheaper offer won"}))
            .await?;
    }
    let (view, events) = finished(&buyer, &id).await?;

    let mut problems = Vec::new();
    if !late_answered {
        problems.push("the late proposal got no automatic reject-proposal".to_owned());
    }
    if &*winner.sender != "globex" {
        problems.push(format!(
            "expected globex (the cheapest in time) to win, not {}",
            winner.sender
        ));
    }
    if collected.silent != ["initech"] {
        problems.push(format!(
            "expected initech to be silent at the deadline, got {:?}",
            collected.silent
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
        events,
        problems,
    })
}

/// Checks the conversation holds exactly these commitments, by debtor and final state, in
/// any order.
fn expect_commitments(
    view: &ConversationView,
    expected: &[(&str, CommitmentState)],
    problems: &mut Vec<String>,
) {
    // By debtor: agents answer concurrently, so creation order may vary between runs.
    let mut found: Vec<(&str, CommitmentState)> = view
        .commitments
        .iter()
        .map(|c| (&*c.debtor, c.state))
        .collect();
    found.sort_by_key(|(debtor, _)| *debtor);
    let mut expected = expected.to_vec();
    expected.sort_by_key(|(debtor, _)| *debtor);
    if found != expected {
        let show = |list: &[(&str, CommitmentState)]| {
            list.iter()
                .map(|(debtor, state)| format!("{debtor} {}", state.name()))
                .collect::<Vec<_>>()
        };
        problems.push(format!(
            "commitments: expected {:?}, found {:?}",
            show(&expected),
            show(&found)
        ));
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn templates() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_demo_plays_every_scenario_to_its_expected_outcome() {
        let mut out = Vec::new();
        let width = usize::from(transcript::DEFAULT_WIDTH);
        let result =
            tokio::time::timeout(Duration::from_secs(60), run(&templates(), width, &mut out))
                .await
                .expect("the demo finishes");
        let out = String::from_utf8(out).expect("transcripts are UTF-8");
        assert!(result.is_ok(), "{result:?}\n{out}");
        let mut titles = vec![
            "fipa-request",
            "fipa-query",
            "fipa-contract-net",
            "a2a-request",
        ];
        // Built by templates/examples/build.sh, which the test command runs first.
        for (build, hook) in CREDIT_BUILDS
            .iter()
            .zip(["credit_assessment.wasm", "credit_assessment_js.wasm"])
        {
            if templates().join(build.file).with_file_name(hook).is_file() {
                titles.push(build.name);
                let words = out.split_whitespace().collect::<Vec<_>>().join(" ");
                let said = format!(
                    "written in {} and built into {}",
                    build.language, build.form
                );
                assert!(words.contains(&said), "{out}");
            }
        }
        for title in titles {
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
