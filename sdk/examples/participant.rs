//! A participant agent: answers FIPA requests and queries from its inbox stream.
//!
//! Start a server (`colloquy serve`, open development mode), then:
//! `cargo run -p colloquy-sdk --example participant -- http://127.0.0.1:7700 bob`
//! and run the `initiator` example in another terminal.

use colloquy_sdk::{Client, Handlers};
use serde_json::json;

/// What `--help` prints.
const USAGE: &str = "\
participant: answers FIPA requests and queries from its inbox stream.

Usage: participant [URL] [AGENT]   (defaults: http://127.0.0.1:7700 bob)
       participant -h|--help      print this text
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
    let agent = args.next().unwrap_or_else(|| "bob".into());
    let token = std::env::var("COLLOQUY_TOKEN").ok();
    let client = Client::connect(&url, &agent, token.as_deref()).await?;
    let handlers = Handlers::new()
        .on("fipa-request", "request", |msg| async move {
            println!("request in {}: {}", msg.conversation_id(), msg.content());
            msg.agree(json!({})).await?;
            msg.inform(json!({"done": true})).await?;
            Ok(())
        })
        .on_any("query-ref", |msg| async move {
            msg.inform(json!({"value": 42})).await?;
            Ok(())
        })
        .on("fipa-contract-net", "cfp", |msg| async move {
            msg.propose(json!({"price": 100})).await?;
            Ok(())
        })
        .on("fipa-contract-net", "accept-proposal", |msg| async move {
            msg.inform(json!({"done": true})).await?;
            Ok(())
        });
    println!("{agent} serving its inbox at {url}; Ctrl-C to stop");
    client.serve(handlers, 0).await?;
    Ok(())
}
