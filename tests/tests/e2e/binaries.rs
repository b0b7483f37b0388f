//! Every binary of this crate answers `--help` with its usage, on stdout, and exits 0 (they
//! used to take it for an argument, fail, and print an error).

use std::process::Command;

fn answers_help(program: &str, name: &str) {
    for flag in ["--help", "-h"] {
        let output = Command::new(program)
            .arg(flag)
            .output()
            .unwrap_or_else(|error| panic!("{name} {flag}: {error}"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{name} {flag} exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains(&format!("Usage: {name}")),
            "{name} {flag} printed no usage: {stdout}"
        );
    }
}

#[test]
fn http_bench_answers_help() {
    answers_help(env!("CARGO_BIN_EXE_http-bench"), "http-bench");
}

#[test]
fn bench_echo_answers_help() {
    answers_help(env!("CARGO_BIN_EXE_bench-echo"), "bench-echo");
}
