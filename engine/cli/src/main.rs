//! The `colloquy` command line.
//!
//! - `colloquy serve`: the HTTP service over a template directory (hot-reloaded, with the
//!   policy manager's API embedded), or following a remote policy manager.
//! - `colloquy policy-manager serve`: the policy manager alone.
//! - `colloquy demo`: the built-in protocols played by simulated SDK agents over HTTP, as
//!   transcripts.
//! - `colloquy templates check DIR`: compile a template directory and list it, or print the
//!   compiler's diagnostics.
//! - `colloquy templates schema`: the JSON Schema of the template format, for editors.
//! - `colloquy hooks call TEMPLATE EVENT`: run a template's hook once on an event.
//!
//! # Layout
//! `serve` (the service), `policy_manager` (the policy manager and the template set-up of
//! `serve`), `demo` (the scenarios), `transcript` (sequence diagrams of a conversation's
//! event log), `templates` and `hooks` (their subcommands), `a2a_agent` (a sample remote
//! A2A agent), `allocator` (mimalloc's settings for `serve`).
//!
//! # Dependencies
//! Every engine crate: `colloquy-core` (the engine), `colloquy-hooks` (the wasm runtime),
//! `colloquy-store` (through the server's `--store`), `colloquy-a2a` and `colloquy-server`;
//! the SDK for the demo's agents. Nothing depends on this crate.

mod a2a_agent;
mod allocator;
mod audit;
mod demo;
mod hooks;
mod mcp_bridge;
mod policy_manager;
mod serve;
mod templates;
mod transcript;

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use colloquy_server::trace_export;
use tracing_subscriber::EnvFilter;

/// mimalloc: markedly faster than the system allocator for the many small, short-lived
/// allocations of request handling.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Log filter when `RUST_LOG` is unset. The one-shot commands report through their output
/// (the demo's transcripts show violations the engine also logs as warnings), so only
/// errors are logged by default.
const DEFAULT_LOG_FILTER: &str = "error";
/// Log filter of `colloquy serve` when `RUST_LOG` is unset: start-up, warnings (violations,
/// failed webhooks) and errors, without a line per request.
const SERVE_LOG_FILTER: &str = "info,tower_http=warn";
/// Narrowest and widest transcripts: below 60 columns a five-agent diagram leaves no room
/// for text; beyond 240 no terminal is that wide.
const MIN_WIDTH: i64 = 60;
const MAX_WIDTH: i64 = 240;

/// Colloquy: a policy-driven dialogue engine for agents speaking FIPA performatives.
#[derive(Debug, Parser)]
#[command(name = "colloquy", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API over a template directory.
    Serve(Box<serve::ServeArgs>),
    /// Play the built-in protocols with simulated agents and print each conversation as a
    /// sequence diagram drawn from the engine's event log.
    Demo {
        /// Template directory [default: ./templates, else the source tree's templates/].
        #[arg(long, value_name = "DIR")]
        templates: Option<PathBuf>,
        /// Width of the transcripts, in columns.
        #[arg(
            long,
            value_name = "COLUMNS",
            default_value_t = transcript::DEFAULT_WIDTH,
            value_parser = clap::value_parser!(u16).range(MIN_WIDTH..=MAX_WIDTH),
        )]
        width: u16,
    },
    /// Run the policy manager alone (templates, uploads, change feed for remote engines).
    PolicyManager {
        #[command(subcommand)]
        command: policy_manager::PolicyManagerCommand,
    },
    /// Work with template files.
    Templates {
        #[command(subcommand)]
        command: TemplatesCommand,
    },
    /// An MCP server on standard input and output that bridges to a running server's
    /// `/mcp`, for MCP hosts that launch local servers (Claude Desktop).
    Mcp(mcp_bridge::McpArgs),
    /// Audit records: verify one offline, fetch one, make the key a server signs them with.
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
    },
    /// Run hooks outside a server.
    Hooks {
        #[command(subcommand)]
        command: HooksCommand,
    },
}

#[derive(Debug, Subcommand)]
enum HooksCommand {
    /// Load a template's hook and call it on an event: prints the answer as JSON, or the
    /// failure, and how long loading and the calls took.
    Call {
        /// The template file (*.yaml) naming the hook.
        template: PathBuf,
        /// A JSON file holding the hook's input (docs/hook-input.schema.json); its `hook`
        /// field says which event.
        event: PathBuf,
        /// Calls to make (on reused instances, as the engine makes them).
        #[arg(long, default_value_t = 1, value_name = "N")]
        repeat: u32,
    },
}

#[derive(Debug, Subcommand)]
enum TemplatesCommand {
    /// Compile every template in DIR; list them (and any warnings), or print the
    /// diagnostics and exit 1.
    Check {
        /// The directory holding the *.yaml templates.
        dir: PathBuf,
        /// `--deny warnings`: exit 1 when a template has a warning (for CI).
        #[arg(long, value_name = "warnings", value_parser = ["warnings"])]
        deny: Option<String>,
    },
    /// Print the JSON Schema of the template format (or of the test file format).
    Schema {
        /// Which format: `template` (a conversation template) or `test` (a
        /// `*.test.yaml` file of `templates test`).
        #[arg(long, value_enum, default_value_t = templates::SchemaKind::Template)]
        kind: templates::SchemaKind,
    },
    /// Run the template tests (`*.test.yaml`) at the paths given: each case in an engine
    /// in memory, hooks included. Exit 0 when all pass, 1 when a case fails (or coverage is
    /// below --threshold), 2 when a test file cannot be loaded.
    Test {
        /// Test files, or folders searched for `*.test.yaml` [default: ./templates, else
        /// the source tree's templates/].
        paths: Vec<PathBuf>,
        /// Only the cases whose name (or template's name) contains TEXT.
        #[arg(long, value_name = "TEXT")]
        filter: Option<String>,
        /// Report which states, transitions, rules and commitment states the cases reach.
        #[arg(long)]
        coverage: bool,
        /// Fail when coverage (of every item of every template tested) is below PCT.
        #[arg(long, value_name = "PCT")]
        threshold: Option<f64>,
        /// How to write the report.
        #[arg(long, value_enum, default_value_t = templates::test::Format::Text)]
        format: templates::test::Format,
    },
    /// Search every sequence of messages and deadlines up to a depth for stuck
    /// conversations, unreachable parts, engine bugs and hook failures; each finding with a
    /// test case that shows it. Exit 0 with no findings, 1 with findings, 2 when the
    /// template cannot be loaded.
    Explore {
        /// A template's name (in --dir) or a template file.
        template: String,
        /// Where named templates are [default: ./templates, else the source tree's templates/].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Search conversations with 1 to N participants (within the template's roles).
        #[arg(long, default_value_t = 2, value_name = "N")]
        participants: usize,
        /// Inputs after the start, at most.
        #[arg(long, default_value_t = 6, value_name = "D")]
        depth: usize,
        /// Sequences to run at most.
        #[arg(long, default_value_t = 200_000, value_name = "S")]
        max_states: usize,
        /// Write the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// What changes between two revisions of a template, in the protocol's terms: states,
    /// moves per state and role, deadlines, outcome rules, commitments, schemas (wider or
    /// narrower), roles, enforcement, hooks. Exit 0 when nothing changes, 1 when something
    /// does, 2 when a file does not compile.
    Diff {
        /// The old template file.
        old: PathBuf,
        /// The new template file.
        new: PathBuf,
        /// Write the changes as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Re-drive a template's recorded conversations from a store against a candidate
    /// template file, and report which would have gone differently and where first. Reads
    /// the store without writing (a server may run on it). Exit 0 when all replay the same,
    /// 1 when some diverge, 2 when the store or the candidate cannot be read.
    Replay {
        /// The store: `sqlite:PATH` (read-only, beside a running server),
        /// `redis://HOST:PORT[/DB]` or `postgres://USER@HOST:PORT/DB`.
        #[arg(long)]
        store: String,
        /// Whose conversations: the template's name.
        #[arg(long)]
        template: String,
        /// The candidate template file.
        #[arg(long)]
        candidate: PathBuf,
        /// Only conversations started since: Unix milliseconds, or a duration ago (`7d`).
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// At most N conversations, oldest first.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// How to write the report: text or json.
        #[arg(long, value_parser = ["text", "json"], default_value = "text")]
        format: String,
    },
    /// A template's rollout on a running server: stage a candidate, read its shadow
    /// report, ramp, promote, roll back, read the history.
    #[command(flatten)]
    Rollout(templates::rollout::RolloutCommand),
}

fn main() -> ExitCode {
    crate::allocator::tune_for_server();
    let cli = Cli::parse();
    let default_filter = match cli.command {
        Command::Serve(_) | Command::PolicyManager { .. } => SERVE_LOG_FILTER,
        _ => DEFAULT_LOG_FILTER,
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let export = match &cli.command {
        Command::Serve(args) => args.trace_export(),
        _ => None,
    };
    let traces = match start_logging(filter, export) {
        Ok(traces) => traces,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let code = finish(run(cli));
    // The last spans, from the shutdown itself, go out once the server has stopped.
    if let Some(traces) = traces
        && let Err(error) = traces.shutdown()
    {
        eprintln!("warning: the last traces were not exported: {error}");
    }
    code
}

/// Logs to stderr through `filter`; with `export`, spans also go to an OpenTelemetry
/// collector, through a layer of their own (the log filter does not limit them). Without,
/// the subscriber is the log formatter alone, and spans nobody logs cost nothing.
fn start_logging(
    filter: EnvFilter,
    export: Option<trace_export::TraceExport>,
) -> Result<Option<trace_export::ExportHandle>, trace_export::TraceExportError> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let Some(export) = export else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(io::stderr)
            .with_ansi(io::stderr().is_terminal())
            .init();
        return Ok(None);
    };
    let (traces, handle) = export.install()?;
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal())
        .with_filter(filter);
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .init();
    tracing::info!(endpoint = %export.endpoint, protocol = %export.protocol, sample = export.sample_ratio, "exporting traces");
    Ok(Some(handle))
}

/// The exit code of a command's result, its error reported.
fn finish(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        // A closed pipe (`colloquy templates schema | head`) is the reader's choice, not a
        // failure worth reporting.
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = io::stdout().flush();
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let mut out = io::stdout().lock();
    match cli.command {
        Command::Serve(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let served = runtime.block_on(serve::run(*args, &mut out));
            // Whatever is still running (a store write on a blocking thread) gets a moment,
            // not a veto over the exit.
            runtime.shutdown_timeout(RUNTIME_EXIT_GRACE);
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::PolicyManager { command } => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let served = runtime.block_on(policy_manager::run(command, &mut out));
            runtime.shutdown_timeout(RUNTIME_EXIT_GRACE);
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo { templates, width } => {
            let dir = templates.unwrap_or_else(default_templates_dir);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(demo::run(&dir, usize::from(width), &mut out))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Templates {
            command: TemplatesCommand::Check { dir, deny },
        } => templates::check(&dir, deny.is_some(), &mut out, &mut io::stderr().lock()),
        Command::Audit { command } => audit::run(command, &mut out),
        Command::Mcp(args) => {
            // Standard output is the bridge's channel, written from its runtime's threads.
            drop(out);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let bridged = runtime.block_on(mcp_bridge::run(args));
            runtime.shutdown_timeout(RUNTIME_EXIT_GRACE);
            bridged?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Hooks {
            command:
                HooksCommand::Call {
                    template,
                    event,
                    repeat,
                },
        } => hooks::call(
            &template,
            &event,
            repeat,
            &mut out,
            &mut io::stderr().lock(),
        ),
        Command::Templates {
            command: TemplatesCommand::Schema { kind },
        } => {
            templates::schema(kind, &mut out)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Templates {
            command:
                TemplatesCommand::Test {
                    paths,
                    filter,
                    coverage,
                    threshold,
                    format,
                },
        } => {
            let paths = if paths.is_empty() {
                vec![default_templates_dir()]
            } else {
                paths
            };
            let options = templates::test::TestOptions {
                paths,
                filter,
                coverage,
                threshold,
                format,
            };
            templates::test::test(&options, &mut out, &mut io::stderr().lock())
        }
        Command::Templates {
            command:
                TemplatesCommand::Explore {
                    template,
                    dir,
                    participants,
                    depth,
                    max_states,
                    json,
                },
        } => {
            let options = templates::explore::ExploreOptions {
                template,
                dir: dir.unwrap_or_else(default_templates_dir),
                limits: colloquy_sandbox::explore::Limits {
                    participants,
                    depth,
                    max_states,
                },
                json,
            };
            templates::explore::run(&options, &mut out, &mut io::stderr().lock())
        }
        Command::Templates {
            command: TemplatesCommand::Diff { old, new, json },
        } => templates::diff(&old, &new, json, &mut out, &mut io::stderr().lock()),
        Command::Templates {
            command:
                TemplatesCommand::Replay {
                    store,
                    template,
                    candidate,
                    since,
                    limit,
                    format,
                },
        } => {
            let options = templates::replay::ReplayOptions {
                store,
                template,
                candidate,
                since,
                limit,
                json: format == "json",
            };
            templates::replay::run(&options, &mut out, &mut io::stderr().lock())
        }
        Command::Templates {
            command: TemplatesCommand::Rollout(command),
        } => templates::rollout::run(command, &mut out, &mut io::stderr().lock()),
    }
}

/// How long a server's runtime waits, once the server has shut down, for tasks still
/// running before the process exits anyway.
const RUNTIME_EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits for the signal to stop a server: Ctrl-C (SIGINT) from a terminal, or SIGTERM, which
/// is how service managers and container runtimes (systemd, Docker, Kubernetes) ask a process
/// to stop. Either way the server shuts down gracefully: it stops accepting, finishes the
/// requests in progress and closes its store. A second signal while it does stops it at once
/// ([`shut_down_unless_told_again`]).
pub(crate) async fn shutdown_signal() -> anyhow::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.map(|()| "SIGINT").map_err(Into::into),
        _ = terminate.recv() => Ok("SIGTERM"),
    }
}

/// Runs a graceful `shutdown`, unless a second SIGINT or SIGTERM comes first: then the
/// server stops without waiting (nothing acknowledged is lost; requests in flight fail).
pub(crate) async fn shut_down_unless_told_again(
    shutdown: impl std::future::Future<Output = io::Result<()>>,
) -> anyhow::Result<()> {
    tokio::select! {
        finished = shutdown => finished.map_err(Into::into),
        signal = shutdown_signal() => {
            let signal = signal?;
            tracing::warn!(signal, "second signal: stopping without waiting for requests in flight");
            Ok(())
        }
    }
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// `./templates` when it exists, else the templates shipped in the source tree this binary
/// was built from.
pub(crate) fn default_templates_dir() -> PathBuf {
    let local = PathBuf::from("templates");
    if local.is_dir() {
        return local;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
