//! `--store postgres://USER@HOST:PORT/DB[?sslmode=MODE][&sslrootcert=PATH]`: the URL parsed
//! into a connection config and its TLS connector (`postgres/tls.rs`), the password found
//! beside it, and the URL redacted for messages.
//!
//! Parsed here rather than by `tokio_postgres::Config::from_str`, so that no error can echo
//! a password given in the URL: every message names the [`Locator::redacted`] form.

use std::time::Duration;

use colloquy_core::store::StoreError;
use tokio_postgres::config::SslMode;

use super::tls::Check;

/// The environment variable naming a file whose first line is the password (as a secret
/// mounted by an orchestrator is); it wins over [`PASSWORD_ENV`].
pub const PASSWORD_FILE_ENV: &str = "COLLOQUY_PG_PASSWORD_FILE";
/// The environment variable holding the password, as libpq reads it.
pub const PASSWORD_ENV: &str = "PGPASSWORD";
/// How long opening one connection may take: an unreachable database answers a request
/// with 503 after this rather than hanging.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The port when the URL names none.
const DEFAULT_PORT: u16 = 5432;

/// Where the database is and how to log in.
pub struct Locator {
    pub(crate) config: tokio_postgres::Config,
    /// The TLS connector, unless `sslmode=disable`.
    pub(crate) tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    redacted: String,
}

impl Locator {
    /// Parses a `postgres://` (or `postgresql://`) URL. A password in the URL is accepted
    /// (and never shown), but the environment is the place for it: [`PASSWORD_FILE_ENV`],
    /// else [`PASSWORD_ENV`].
    pub fn parse(url: &str) -> Result<Locator, StoreError> {
        Locator::parse_with(url, |name| std::env::var(name).ok())
    }

    /// [`Locator::parse`] with the environment given, for tests.
    pub(super) fn parse_with(
        url: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Locator, StoreError> {
        let invalid = |why: &str| {
            StoreError::Unavailable(format!(
                "invalid Postgres URL {}: {why}",
                redact_unparsed(url)
            ))
        };
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or_else(|| invalid("expected postgres://USER@HOST:PORT/DB"))?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, database) = rest
            .split_once('/')
            .ok_or_else(|| invalid("no database: expected postgres://USER@HOST:PORT/DB"))?;
        let (user_info, host_port) = authority
            .rsplit_once('@')
            .ok_or_else(|| invalid("no user: expected postgres://USER@HOST:PORT/DB"))?;
        let (user, url_password) = match user_info.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (user_info, None),
        };
        let user = decode(user).ok_or_else(|| invalid("the user is not percent-encoded UTF-8"))?;
        let database =
            decode(database).ok_or_else(|| invalid("the database is not percent-encoded UTF-8"))?;
        if user.is_empty() || database.is_empty() {
            return Err(invalid("the user and the database must not be empty"));
        }
        // `[v6 address]:port`, or `host:port`; the port may be left out.
        let (host, port) = match host_port.strip_prefix('[') {
            Some(bracketed) => {
                let (host, after) = bracketed
                    .split_once(']')
                    .ok_or_else(|| invalid("an unclosed `[` in the host"))?;
                (host, after.strip_prefix(':'))
            }
            None => match host_port.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (host_port, None),
            },
        };
        let port = match port {
            Some(port) => port
                .parse::<u16>()
                .map_err(|_| invalid("the port is not a number"))?,
            None => DEFAULT_PORT,
        };
        if host.is_empty() {
            return Err(invalid("no host"));
        }
        let (mut ssl_mode, mut check, mut roots) = (SslMode::Prefer, Check::Nothing, None);
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            match pair.split_once('=') {
                Some(("sslmode", mode)) => {
                    (ssl_mode, check) = match mode {
                        "disable" => (SslMode::Disable, Check::Nothing),
                        "prefer" => (SslMode::Prefer, Check::Nothing),
                        "require" => (SslMode::Require, Check::Nothing),
                        "verify-ca" => (SslMode::Require, Check::Chain),
                        "verify-full" => (SslMode::Require, Check::ChainAndHost),
                        other => {
                            return Err(invalid(&format!(
                                "sslmode={other}: expected disable, prefer, require, verify-ca \
                                 or verify-full"
                            )));
                        }
                    }
                }
                Some(("sslrootcert", path)) => {
                    let path = decode(path)
                        .ok_or_else(|| invalid("sslrootcert is not percent-encoded UTF-8"))?;
                    roots = Some(path);
                }
                _ => {
                    return Err(invalid(&format!(
                        "unknown option `{}`: expected sslmode or sslrootcert",
                        pair.split_once('=').map_or(pair, |(name, _)| name)
                    )));
                }
            }
        }
        // As libpq: a root certificate given makes `require` check the chain.
        if ssl_mode == SslMode::Require && check == Check::Nothing && roots.is_some() {
            check = Check::Chain;
        }
        let tls = match ssl_mode {
            SslMode::Disable => None,
            _ => Some(super::tls::connector(check, roots.as_deref())?),
        };
        let password = match url_password {
            Some(password) => Some(
                decode(password)
                    .ok_or_else(|| invalid("the password is not percent-encoded UTF-8"))?,
            ),
            None => match env(PASSWORD_FILE_ENV).filter(|path| !path.is_empty()) {
                Some(path) => Some(read_password_file(&path)?),
                None => env(PASSWORD_ENV).filter(|password| !password.is_empty()),
            },
        };
        let mut config = tokio_postgres::Config::new();
        config
            .user(&user)
            .dbname(&database)
            .host(host)
            .port(port)
            .ssl_mode(ssl_mode)
            .connect_timeout(CONNECT_TIMEOUT)
            .keepalives(true)
            .application_name("colloquy")
            // Acknowledged means durable: whatever the server's default, a commit returns
            // once its WAL is flushed. And a transaction this node gave up on (every one is
            // bounded by `OPERATION_DEADLINE` here) ends on the server too: a session idle in
            // its transaction that long has lost its client (a half-open link), and would
            // otherwise hold its row and advisory locks, and with them every other node's
            // commits and lease takes, until the link came back.
            .options(format!(
                "-c synchronous_commit=on -c idle_in_transaction_session_timeout={}",
                super::OPERATION_DEADLINE.as_millis()
            ));
        if let Some(password) = &password {
            config.password(password);
        }
        let bracketed = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        Ok(Locator {
            config,
            tls,
            redacted: format!("postgres://{user}@{bracketed}:{port}/{database}"),
        })
    }

    /// The URL without its password: what errors and logs show.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }
}

/// The first line of the password file at `path`.
fn read_password_file(path: &str) -> Result<String, StoreError> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        StoreError::Unavailable(format!(
            "cannot read the Postgres password file {path} ({PASSWORD_FILE_ENV}): {error}"
        ))
    })?;
    Ok(text.lines().next().unwrap_or_default().to_owned())
}

/// A URL that did not parse, shown with whatever stands between `://` and the last `@`
/// (where a password would be) cut down to the user.
fn redact_unparsed(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(not a URL)".to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((user_info, _)) => {
            let user = user_info
                .split_once(':')
                .map_or(user_info, |(user, _)| user);
            let after = &rest[user_info.len()..];
            format!("{scheme}://{user}{after}")
        }
        None => url.to_owned(),
    }
}

/// Percent-decodes `text`; `None` when it is not valid.
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = text.get(index + 1..index + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_url_gives_host_port_user_and_database() {
        let locator = Locator::parse_with("postgres://colloquy@db.internal:6543/engine", no_env)
            .expect("parse");
        assert_eq!(
            locator.redacted(),
            "postgres://colloquy@db.internal:6543/engine"
        );
        assert_eq!(locator.config.get_user(), Some("colloquy"));
        assert_eq!(locator.config.get_dbname(), Some("engine"));
        assert_eq!(locator.config.get_ports(), &[6543]);
        assert_eq!(locator.config.get_ssl_mode(), SslMode::Prefer);
        assert!(locator.config.get_password().is_none());
        let plain =
            Locator::parse_with("postgresql://u@h/d?sslmode=disable", no_env).expect("parse");
        assert_eq!(plain.config.get_ports(), &[DEFAULT_PORT]);
        assert_eq!(plain.config.get_ssl_mode(), SslMode::Disable);
    }

    #[test]
    fn the_password_comes_from_the_file_then_the_environment_and_is_never_shown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("password");
        std::fs::write(&file, "from-the-file\n").expect("write");
        let file = file.display().to_string();
        let env = |name: &str| match name {
            PASSWORD_FILE_ENV => Some(file.clone()),
            PASSWORD_ENV => Some("from-the-env".to_owned()),
            _ => None,
        };
        let locator = Locator::parse_with("postgres://u@h:1/d", env).expect("parse");
        assert_eq!(locator.config.get_password(), Some(&b"from-the-file"[..]));
        let locator = Locator::parse_with("postgres://u@h:1/d", |name| {
            (name == PASSWORD_ENV).then(|| "from-the-env".to_owned())
        })
        .expect("parse");
        assert_eq!(locator.config.get_password(), Some(&b"from-the-env"[..]));
        let locator =
            Locator::parse_with("postgres://u:s%40cret-in-url@h:1/d", env).expect("parse");
        assert_eq!(locator.config.get_password(), Some(&b"s@cret-in-url"[..]));
        assert!(!locator.redacted().contains("cret"));
        for bad in [
            "postgres://u:s3cret-in-url@h:1/d?sslmode=allow",
            "postgres://u:s3cret-in-url@h:port/d",
            "postgres://u:s3cret-in-url@h:1/d?colour=blue",
            "postgres://u:s3cret-in-url@h:1",
        ] {
            let error = Locator::parse_with(bad, no_env)
                .err()
                .expect("refused")
                .to_string();
            assert!(!error.contains("s3cret"), "{error}");
            assert!(error.contains("postgres://u@h"), "{error}");
        }
    }

    #[test]
    fn each_sslmode_sets_tls_as_libpq_does_and_others_are_refused() {
        let mode = |query: &str| {
            let locator =
                Locator::parse_with(&format!("postgres://u@h:1/d{query}"), no_env).expect("parse");
            (locator.config.get_ssl_mode(), locator.tls.is_some())
        };
        assert_eq!(mode(""), (SslMode::Prefer, true));
        assert_eq!(mode("?sslmode=prefer"), (SslMode::Prefer, true));
        assert_eq!(mode("?sslmode=disable"), (SslMode::Disable, false));
        for required in ["require", "verify-ca", "verify-full"] {
            assert_eq!(
                mode(&format!("?sslmode={required}")),
                (SslMode::Require, true),
                "{required}"
            );
        }
        let error = Locator::parse_with("postgres://u@h:1/d?sslmode=allow", no_env)
            .err()
            .expect("refused")
            .to_string();
        assert!(error.contains("sslmode=allow: expected disable"), "{error}");
        let error = Locator::parse_with(
            "postgres://u@h:1/d?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            no_env,
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(
            error.contains("cannot read the Postgres sslrootcert /nonexistent/ca.pem"),
            "{error}"
        );
    }
}
