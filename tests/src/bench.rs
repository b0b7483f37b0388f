//! What the benchmark binaries (`http-bench`, `a2a-bench`) share: servers run as child
//! processes, keep-alive connections to them, and what `/proc` says of a process.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A child process listening at `addr`, killed on drop.
pub struct Process {
    /// The process.
    pub child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Process {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Killing an exited child fails harmlessly.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `program` (on CPU 0 with one tokio worker when `pin`), and waits for the first
/// line of its stdout that names an `http://` address.
pub fn spawn(program: &Path, args: &[&str], pin: bool) -> anyhow::Result<Process> {
    let mut command = if pin {
        let mut command = Command::new("taskset");
        command.arg("-c").arg("0").arg(program);
        command.env("TOKIO_WORKER_THREADS", "1");
        command
    } else {
        Command::new(program)
    };
    let mut child = command
        .args(args)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines
            .next()
            .with_context(|| format!("{} exited before listening", program.display()))??;
        if let Some(url) = line.split("http://").nth(1) {
            let authority = url.split(['/', ' ']).next().unwrap_or_default();
            break authority.trim().parse()?;
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Ok(Process { child, addr })
}

/// A keep-alive HTTP/1.1 connection to `addr`, without Nagle's delay.
pub async fn connect(addr: SocketAddr) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// Resident memory of the process `pid` in bytes, from `/proc`.
pub fn resident_bytes(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .context("no VmRSS in /proc status")?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kib * 1024.0)
}

/// CPU seconds the process `pid` has used so far, user and system, all threads, from
/// `/proc` (the clock tick read once).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<(f64, f64)> {
    static TICKS_PER_SECOND: OnceLock<f64> = OnceLock::new();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')').context("malformed /proc stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (user, system): (f64, f64) = (fields[11].parse()?, fields[12].parse()?);
    let per_second = match TICKS_PER_SECOND.get() {
        Some(ticks) => *ticks,
        None => {
            let output = Command::new("getconf").arg("CLK_TCK").output()?;
            let ticks: f64 = String::from_utf8(output.stdout)?.trim().parse()?;
            *TICKS_PER_SECOND.get_or_init(|| ticks)
        }
    };
    Ok((user / per_second, system / per_second))
}
