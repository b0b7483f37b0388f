//! The HTTP benchmark's baseline server: `POST /echo` parses a JSON body into a
//! `serde_json::Value` and answers it back (axum, like `colloquy serve`, same allocator).
//!
//! `bench-echo [ADDR]` (default `127.0.0.1:0`) prints `listening on http://ADDR` and serves
//! until killed.

use std::io::Write as _;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What `--help` prints.
const USAGE: &str = "\
bench-echo: the HTTP benchmark's baseline server; POST /echo answers the JSON body back.

Usage: bench-echo [ADDR]     (default 127.0.0.1:0; prints `listening on http://ADDR`)
       bench-echo -h|--help  print this text
";

fn main() -> anyhow::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".to_owned());
    if addr == "-h" || addr == "--help" {
        print!("{USAGE}");
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        println!("listening on http://{}", listener.local_addr()?);
        std::io::stdout().flush()?;
        colloquy_server::echo::serve(listener).await?;
        anyhow::Ok(())
    })
}
