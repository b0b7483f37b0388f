//! `colloquy audit`: fetch a conversation's audit record from a server, verify one offline,
//! and make the key a server signs records with (`docs/security.md`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use colloquy_trust::jws::{KeySet, Signer};
use colloquy_trust::record::{self, AuditRecord};

use crate::templates::rollout::TOKEN_ENV;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check an audit record offline: the hash chain event by event, its summary, the
    /// template source against the revision, and the engine's signature with the keys
    /// given. Exit 0 when it holds; 1, naming the event and the check, when it does not.
    Verify {
        /// The record (JSON, as `GET /v1/conversations/{id}/audit` answers).
        file: PathBuf,
        /// A JWKS file of keys to trust: the engine's audit key (`GET /v1/audit/keys`).
        /// Repeatable. Without one, an engine signature is reported unchecked.
        #[arg(long, value_name = "FILE")]
        jwks: Vec<PathBuf>,
    },
    /// Fetch a conversation's audit record as the caller may have it and write it out.
    Fetch {
        /// The conversation id.
        id: String,
        /// The server.
        #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:7700")]
        server: String,
        /// The caller's bearer token (an agent's, or the admin's) [default: $COLLOQUY_TOKEN].
        #[arg(long, value_name = "TOKEN")]
        token: Option<String>,
        /// In open development mode: the agent to ask as (none: the administrator).
        #[arg(long, value_name = "ID")]
        agent: Option<String>,
        /// Where to write the record [default: standard output].
        #[arg(long, short, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Make a private key for `colloquy serve --audit-key` (PKCS#8 PEM, Ed25519 unless
    /// `--p256`), and print its public half as a JWKS for verifiers.
    Keygen {
        /// Where to write the private key; refused if the file exists.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// The key id the JWKS names (give the server the same with --audit-key-id).
        #[arg(long, value_name = "KID", default_value = "colloquy-audit")]
        kid: String,
        /// A P-256 (ES256) key instead of Ed25519.
        #[arg(long)]
        p256: bool,
    },
}

/// Runs an `audit` subcommand.
pub fn run(command: AuditCommand, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    match command {
        AuditCommand::Verify { file, jwks } => verify(&file, &jwks, out),
        AuditCommand::Fetch {
            id,
            server,
            token,
            agent,
            out: path,
        } => {
            let token = token.or_else(|| std::env::var(TOKEN_ENV).ok());
            let body = fetch(&server, &id, token.as_deref(), agent.as_deref())?;
            match path {
                Some(path) => std::fs::write(&path, body)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => out.write_all(body.as_bytes())?,
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Keygen {
            out: path,
            kid,
            p256,
        } => keygen(&path, &kid, p256, out),
    }
}

fn verify(file: &Path, jwks: &[PathBuf], out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let record: AuditRecord = serde_json::from_str(&text)
        .with_context(|| format!("{} is not an audit record", file.display()))?;
    let mut keys = KeySet::default();
    for path in jwks {
        keys.add_file(path).map_err(anyhow::Error::msg)?;
    }
    let reader = record.reader.as_deref().unwrap_or("the administrator");
    writeln!(
        out,
        "audit record of conversation {} (template {}, revision {}), for {reader}",
        record.conversation_id, record.template.name, record.template.revision
    )?;
    let verified = match record::verify(&record, &keys) {
        Ok(verified) => verified,
        Err(broken) => {
            writeln!(out, "FAILED: {broken}")?;
            return Ok(ExitCode::FAILURE);
        }
    };
    let chain = &verified.chain;
    write!(
        out,
        "chain: {} events hold, head {}",
        chain.length, chain.head
    )?;
    if verified.redacted > 0 {
        write!(out, "; {} of them seen only as digests", verified.redacted)?;
    }
    writeln!(out)?;
    match chain.chained_from {
        Some(from) if from > 1 => writeln!(
            out,
            "note: events 1 to {} were recorded before chains: covered from event {from} on",
            from - 1
        )?,
        None if chain.length > 0 => writeln!(
            out,
            "note: every event was recorded before chains: the chain is computed, not recorded"
        )?,
        _ => {}
    }
    writeln!(
        out,
        "template: {}",
        if verified.template_checked {
            "the source matches the revision"
        } else {
            "not checked (the record holds no source: the revision was not archived)"
        }
    )?;
    let signature = match (&verified.engine_key, verified.engine_signature_unchecked) {
        (Some(kid), _) => format!(
            "by key `{kid}`, over the chain head at {}",
            record.issued_at
        ),
        (None, true) => "present, NOT checked: give the engine's key with --jwks".to_owned(),
        (None, false) => "none (the server has no --audit-key)".to_owned(),
    };
    writeln!(out, "engine signature: {signature}")?;
    writeln!(out, "ok")?;
    Ok(ExitCode::SUCCESS)
}

/// The record's JSON as the server sent it; a refusal is an error that quotes its body.
fn fetch(
    server: &str,
    id: &str,
    token: Option<&str>,
    agent: Option<&str>,
) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let url = format!(
            "{}/v1/conversations/{id}/audit",
            server.trim_end_matches('/')
        );
        let mut request = reqwest::Client::new().get(&url);
        if let Some(token) = token.filter(|token| !token.is_empty()) {
            request = request.bearer_auth(token);
        }
        if let Some(agent) = agent {
            request = request.header("x-agent-id", agent);
        }
        let response = request.send().await.with_context(|| format!("GET {url}"))?;
        let status = response.status();
        let body = response.text().await?;
        anyhow::ensure!(status.is_success(), "GET {url}: {status}: {body}");
        Ok(body)
    })
}

fn keygen(path: &Path, kid: &str, p256: bool, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let der = if p256 {
        Signer::generate_p256()
    } else {
        Signer::generate_ed25519()
    }
    .map_err(anyhow::Error::msg)?;
    let signer = Signer::from_pkcs8(&der, kid).map_err(anyhow::Error::msg)?;
    write_private(path, colloquy_trust::jws::pkcs8_pem(&der).as_bytes())?;
    let jwks = serde_json::json!({ "keys": [signer.public_jwk()] });
    writeln!(out, "{}", serde_json::to_string_pretty(&jwks)?)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes a new file only its owner may read.
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes)?;
    Ok(())
}
