//! `colloquy templates stage|candidates|ramp|promote|rollback|history`: a template's
//! rollout on a running server, through its HTTP API (`/v1/templates/{name}/candidates…`,
//! `/rollback`, `/history`). The admin's token comes from `--token` or `COLLOQUY_TOKEN`.
//!
//! Exit codes: 0 done, 1 refused by the server (its error printed: not the candidate, no
//! previous revision, a template that does not compile with its diagnostics), 2 when the
//! server cannot be reached or the file cannot be read.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::Value;

/// Environment variable read for the token when `--token` is not given.
pub const TOKEN_ENV: &str = "COLLOQUY_TOKEN";

/// Where and as whom.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The server's URL.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:7700")]
    server: String,
    /// The bearer token (the admin's, for writes) [default: $COLLOQUY_TOKEN].
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// Print the server's JSON answer instead of a summary.
    #[arg(long)]
    json: bool,
}

/// The rollout commands.
#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Stage FILE as the candidate of template NAME: it serves nobody; new conversations get
    /// shadow twins on it, compared with them step by step.
    Stage {
        /// The template.
        name: String,
        /// The candidate's YAML file.
        file: PathBuf,
        /// The share of new conversations shadowed, 0 to 1.
        #[arg(long, default_value_t = 1.0)]
        sample: f64,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Show the candidate of NAME and what its shadow twins and its ramp found.
    Candidates {
        /// The template.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Start PERCENT of new conversations of NAME on its candidate REVISION, for real.
    Ramp {
        /// The template.
        name: String,
        /// The candidate's revision.
        revision: String,
        /// The share of new conversations, 0 (stop) to 100.
        #[arg(long)]
        percent: u8,
        /// Gates that stop the ramp, e.g. `refusal_rate:5,hook_failure_rate:2`.
        #[arg(long, value_name = "GATES")]
        abort_on: Option<String>,
        /// Conversations each side needs before the gates are judged [default: 50].
        #[arg(long, value_name = "N")]
        min_conversations: Option<u64>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Make the candidate REVISION of NAME its active revision.
    Promote {
        /// The template.
        name: String,
        /// The candidate's revision.
        revision: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Make the revision of NAME active before its last change active again.
    Rollback {
        /// The template.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Every activation of NAME: reloads, uploads, stages, ramps, promotions, rollbacks.
    History {
        /// The template.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// One request to make.
struct Request {
    method: reqwest::Method,
    path: String,
    query: Vec<(&'static str, String)>,
    body: Option<String>,
}

/// Runs a rollout command.
pub fn run(
    command: RolloutCommand,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let (server, request, summary): (ServerArgs, Request, fn(&Value) -> String) = match command {
        RolloutCommand::Stage {
            name,
            file,
            sample,
            server,
        } => {
            let yaml = match std::fs::read_to_string(&file) {
                Ok(yaml) => yaml,
                Err(error) => {
                    writeln!(err, "{}: {error}", file.display())?;
                    return Ok(ExitCode::from(2));
                }
            };
            (
                server,
                Request {
                    method: reqwest::Method::POST,
                    path: format!("/v1/templates/{name}/candidates"),
                    query: vec![("sample", sample.to_string())],
                    body: Some(yaml),
                },
                |body| {
                    format!(
                        "staged {} as the candidate of {} (active: {}; shadow sample {})",
                        text(&body["revision"]),
                        text(&body["name"]),
                        text(&body["active"]),
                        body["sample"]
                    )
                },
            )
        }
        RolloutCommand::Candidates { name, server } => (
            server,
            get(format!("/v1/templates/{name}/candidates")),
            candidates_summary,
        ),
        RolloutCommand::Ramp {
            name,
            revision,
            percent,
            abort_on,
            min_conversations,
            server,
        } => {
            let mut query = vec![("percent", percent.to_string())];
            query.extend(abort_on.map(|gates| ("abort_on", gates)));
            query.extend(min_conversations.map(|n| ("min_conversations", n.to_string())));
            (
                server,
                Request {
                    method: reqwest::Method::POST,
                    path: format!("/v1/templates/{name}/candidates/{revision}/ramp"),
                    query,
                    body: None,
                },
                activation_summary,
            )
        }
        RolloutCommand::Promote {
            name,
            revision,
            server,
        } => (
            server,
            post(format!(
                "/v1/templates/{name}/candidates/{revision}/promote"
            )),
            activation_summary,
        ),
        RolloutCommand::Rollback { name, server } => (
            server,
            post(format!("/v1/templates/{name}/rollback")),
            activation_summary,
        ),
        RolloutCommand::History { name, server } => (
            server,
            get(format!("/v1/templates/{name}/history")),
            history_summary,
        ),
    };
    let token = server
        .token
        .clone()
        .or_else(|| std::env::var(TOKEN_ENV).ok())
        .filter(|token| !token.is_empty());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let answer = runtime.block_on(send(&server.server, token.as_deref(), request));
    let (status, body) = match answer {
        Ok(answer) => answer,
        Err(error) => {
            writeln!(err, "{}: {error}", server.server)?;
            return Ok(ExitCode::from(2));
        }
    };
    if !status.is_success() {
        writeln!(
            err,
            "{status}: {} ({})",
            text(&body["error"]["message"]),
            text(&body["error"]["code"])
        )?;
        for diagnostic in body["diagnostics"].as_array().into_iter().flatten() {
            writeln!(
                err,
                "  {}: {}",
                text(&diagnostic["path"]),
                text(&diagnostic["message"])
            )?;
        }
        return Ok(ExitCode::FAILURE);
    }
    if server.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&body)?)?;
    } else {
        writeln!(out, "{}", summary(&body))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn get(path: String) -> Request {
    Request {
        method: reqwest::Method::GET,
        path,
        query: Vec::new(),
        body: None,
    }
}

fn post(path: String) -> Request {
    Request {
        method: reqwest::Method::POST,
        path,
        query: Vec::new(),
        body: None,
    }
}

async fn send(
    server: &str,
    token: Option<&str>,
    request: Request,
) -> Result<(reqwest::StatusCode, Value), reqwest::Error> {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()?;
    let mut builder = client
        .request(
            request.method,
            format!("{}{}", server.trim_end_matches('/'), request.path),
        )
        .query(&request.query);
    if let Some(token) = token {
        builder = builder.bearer_auth(token);
    }
    if let Some(body) = request.body {
        builder = builder
            .header(reqwest::header::CONTENT_TYPE, "application/yaml")
            .body(body);
    }
    let response = builder.send().await?;
    let status = response.status();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    Ok((status, body))
}

/// A JSON string as text, anything else as JSON (`-` for null).
fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

fn activation_summary(body: &Value) -> String {
    let activation = &body["activation"];
    format!(
        "{} {}: {} (was {}){}",
        text(&activation["kind"]),
        text(&body["name"]),
        text(&activation["revision"]),
        text(&activation["previous"]),
        activation["detail"]
            .as_str()
            .map(|detail| format!(" — {detail}"))
            .unwrap_or_default()
    )
}

fn candidates_summary(body: &Value) -> String {
    let mut lines = vec![format!(
        "{}: active {}",
        text(&body["name"]),
        text(&body["active"])
    )];
    let candidates = body["candidates"].as_array().cloned().unwrap_or_default();
    if candidates.is_empty() {
        lines.push("no candidate staged".to_owned());
    }
    for candidate in candidates {
        let shadow = &candidate["shadow"];
        lines.push(format!(
            "candidate {} staged by {} (sample {})",
            text(&candidate["revision"]),
            text(&candidate["staged_by"]),
            candidate["sample"]
        ));
        match shadow["reason"].as_str() {
            Some(reason) => lines.push(format!("  shadow off: {reason}")),
            None => lines.push(format!(
                "  shadowed {}: same {}, diverged {} {}, steps dropped {}",
                shadow["shadowed"],
                shadow["same"],
                shadow["diverged"],
                shadow["by_kind"],
                shadow["dropped"]
            )),
        }
        for sample in shadow["samples"].as_array().into_iter().flatten() {
            lines.push(format!(
                "  {} diverged ({}) at step {}: {}",
                text(&sample["conversation_id"]),
                text(&sample["kind"]),
                sample["step"],
                text(&sample["input"])
            ));
        }
        let ramp = &candidate["ramp"];
        if !ramp.is_null() {
            lines.push(format!(
                "  ramp {}%{}: candidate {} conversations ({} refused, {} hook failures of {} messages), active {} ({} refused, {} hook failures of {} messages)",
                ramp["percent"],
                ramp["aborted"]
                    .as_str()
                    .map(|why| format!(" — stopped by its gates: {why}"))
                    .unwrap_or_default(),
                ramp["candidate"]["conversations"],
                ramp["candidate"]["refused"],
                ramp["candidate"]["hook_failures"],
                ramp["candidate"]["messages"],
                ramp["active"]["conversations"],
                ramp["active"]["refused"],
                ramp["active"]["hook_failures"],
                ramp["active"]["messages"],
            ));
        }
    }
    lines.join("\n")
}

fn history_summary(body: &Value) -> String {
    let mut lines = vec![format!(
        "{}: active {}",
        text(&body["name"]),
        text(&body["active"])
    )];
    for activation in body["activations"].as_array().into_iter().flatten() {
        lines.push(format!(
            "  {} {:<8} {} (was {}) by {}{}",
            activation["at"],
            text(&activation["kind"]),
            text(&activation["revision"]),
            text(&activation["previous"]),
            text(&activation["by"]),
            activation["detail"]
                .as_str()
                .map(|detail| format!(" — {detail}"))
                .unwrap_or_default()
        ));
    }
    lines.join("\n")
}
