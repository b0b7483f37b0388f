//! An initiator agent: one FIPA request and one query, printing what comes back.
//!
//! With a server and the `participant` example running:
//! `cargo run -p colloquy-sdk --example initiator -- http://127.0.0.1:7700 alice bob`

use colloquy_sdk::{AskOptions, Client};
use serde_json::json;

/// What `--help` prints.
const USAGE: &str = "\
initiator: one FIPA request and one query to a participant agent, printing what comes back.

Usage: initiator [URL] [AGENT] [PARTICIPANT]   (defaults: http://127.0.0.1:7700 alice bob)
       initiator -h|--help                    print this text
The bearer token, when the server needs one, is read from COLLOQUY_TOKEN.
";

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    if std::env::args()
        .nth(1)
        .is_some_and(|arg| arg == "-h" || arg == "--help")
    {
        print!("{USAGE}");
        return Ok(());
    }
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:7700".into());
    let agent = args.next().unwrap_or_else(|| "alice".into());
    let participant = args.next().unwrap_or_else(|| "bob".into());
    let token = std::env::var("COLLOQUY_TOKEN").ok();
    let client = Client::connect(&url, &agent, token.as_deref()).await?;

    // Watch the intermediate `agree` while waiting for the final answer.
    let (observer, mut observed) =
        tokio::sync::mpsc::unbounded_channel::<colloquy_sdk::protocol::Message>();
    let watcher = tokio::spawn(async move {
        while let Some(message) = observed.recv().await {
            println!("  … {} from {}", message.performative, message.sender);
        }
    });
    let answer = client
        .request(
            &participant,
            json!({"action": "book-room", "room": "Lovelace"}),
            AskOptions::default().observe(observer),
        )
        .await?;
    // The observer was moved into the options, dropped with them: the watcher ends.
    watcher.await?;
    println!(
        "request {}: {:?}, final {:?}",
        answer.conversation_id,
        answer.outcome,
        answer.reply.map(|m| m.content)
    );

    let answer = client
        .query(
            &participant,
            json!({"ref": "the answer"}),
            AskOptions::default(),
        )
        .await?;
    println!(
        "query {}: {:?}",
        answer.conversation_id,
        answer.reply.map(|m| m.content)
    );
    Ok(())
}
