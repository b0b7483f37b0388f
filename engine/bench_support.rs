//! What the benchmark binaries share: reading their numeric arguments.

/// The number after `name` on the command line (`_` separators allowed, as in `50_000`),
/// or `default`.
pub fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}
