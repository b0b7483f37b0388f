//! The Rust SDK's side of `sdk/python/bench/request_rate.py`: request conversations at full
//! speed through the SDK, in lanes: each lane is an initiator calling `request` in a loop
//! and a participant `serve`-ing its inbox (agree, then inform), so `LANES` conversations
//! run at once. One thread (a current-thread runtime), as the Python side has.
//!
//! It warms up, prints `measuring`, counts the conversations that end in success during
//! the measured window, prints `done <conversations> <failures>`, then waits for a line on
//! stdin before exiting, so whoever reads its CPU time reads that of the window alone.
//! Agents are `<PREFIX>i<n>` and `<PREFIX>p<n>`, each with the token `<id>-token`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use colloquy_sdk::protocol::conversation::Outcome;
use colloquy_sdk::{AskOptions, Client, Handlers};
use serde_json::json;

/// What `--help` prints.
const USAGE: &str = "\
request_rate: request conversations at full speed through the Rust SDK (load for
sdk/python/bench/request_rate.py).

Usage: request_rate URL PREFIX LANES WARMUP_S MEASURE_S
       request_rate -h|--help      print this text
";

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args
        .first()
        .is_some_and(|arg| arg == "-h" || arg == "--help")
    {
        print!("{USAGE}");
        return Ok(());
    }
    if args.len() != 5 {
        anyhow::bail!("expected 5 arguments, got {}\n{USAGE}", args.len());
    }
    let (url, prefix) = (&args[0], &args[1]);
    let lanes: usize = args[2].parse()?;
    let warmup = Duration::from_secs_f64(args[3].parse()?);
    let measure = Duration::from_secs_f64(args[4].parse()?);
    let succeeded = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));

    for lane in 0..lanes {
        let participant_id = format!("{prefix}p{lane}");
        let participant = Client::new(
            url,
            &participant_id,
            Some(&format!("{participant_id}-token")),
        )?;
        let handlers = Handlers::new().on("fipa-request", "request", |msg| async move {
            msg.agree(json!({})).await?;
            msg.inform(json!({"done": true})).await?;
            Ok(())
        });
        tokio::spawn(async move { participant.serve(handlers, 0).await });

        let initiator_id = format!("{prefix}i{lane}");
        let initiator = Client::new(url, &initiator_id, Some(&format!("{initiator_id}-token")))?;
        let (succeeded, failed) = (succeeded.clone(), failed.clone());
        tokio::spawn(async move {
            loop {
                let answer = initiator
                    .request(
                        &participant_id,
                        json!({"action": "bench"}),
                        AskOptions::default(),
                    )
                    .await;
                match answer {
                    Ok(answer) if answer.outcome == Some(Outcome::Success) => {
                        succeeded.fetch_add(1, Ordering::Relaxed)
                    }
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        });
    }

    tokio::time::sleep(warmup).await;
    println!("measuring");
    let (before, failed_before) = (
        succeeded.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    tokio::time::sleep(measure).await;
    let (after, failed_after) = (
        succeeded.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    println!("done {} {}", after - before, failed_after - failed_before);
    // Blocking the only thread stops every lane: the process uses no CPU while it waits.
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    std::process::exit(0);
}
