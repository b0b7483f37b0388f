//! The accept loop every HTTP server of the crate runs (the service, the standalone policy
//! manager, the benchmark's echo baseline): HTTP/1.1 on hyper, one task per connection,
//! `TCP_NODELAY`, and a deadline for a request's head.
//!
//! It replaces `axum::serve`, which builds its connections without a timer, so hyper's
//! header read timeout never runs there: a client that opens a connection and sends half a
//! request line held the connection (a socket, a task) for as long as it liked, and enough
//! of them would exhaust the process's file descriptors (slowloris).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::time::Duration;

use axum::http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower::ServiceBuilder;
use tower_http::trace::TraceLayer;

/// How long a client has to send a request's head (request line and headers) once the
/// server starts waiting for one. Also how long an idle keep-alive connection stays open:
/// hyper arms the deadline as soon as it waits for the next request.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a graceful shutdown waits for open connections (their requests in progress and
/// their streams) before it drops them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Pause after an accept error other than a failed handshake, such as running out of file
/// descriptors: retrying at once would spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `shutdown` completes; then stops accepting, lets every
/// open connection finish its request in progress (at most [`SHUTDOWN_GRACE`]) and returns.
///
/// `app` is any cloneable service: a `Router`, or a `Router` inside middleware applied once
/// to the whole of it (`ServiceBuilder::new().layer(..).service(router)`). Layers applied
/// with `Router::layer` wrap every route instead, and each request then clones a boxed
/// service per layer.
pub async fn serve<S, B>(
    listener: TcpListener,
    app: S,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        // A header line hyper cannot parse (a value with control bytes, a name that is not a
        // token) is dropped rather than refused: hyper refuses a head with a bare 400 and no
        // body, before the service sees the request, so the client learnt nothing. Dropped,
        // the header is absent, and the service answers as it would without it (every
        // answer of its own, and every error, with its JSON body; it never reads
        // `Content-Type`, and a missing credential is a 401 that says so).
        .ignore_invalid_headers(true);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) if is_connection_error(&error) => continue,
                Err(error) => {
                    tracing::warn!(%error, "cannot accept a connection; retrying");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Small request-reply exchanges: send each answer at once rather than batch it.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set");
        }
        let service = TowerToHyperService::new(app.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // A client that goes away, or sends garbage, ends only its own connection.
            if let Err(error) = connection.await {
                tracing::trace!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "connections still open {}s after shutdown began; dropping them",
            SHUTDOWN_GRACE.as_secs()
        );
    }
    Ok(())
}

/// Spawns [`serve`] for `app` (the service and the standalone policy manager both run this),
/// with `tower_http`'s request tracing around the whole router once, when its output is
/// enabled (`RUST_LOG=tower_http=debug`). Otherwise the layer would log nothing and still read
/// the clock three times a request: `colloquy serve`'s default filter keeps `tower_http` at
/// `warn`, and the API logs its own 5xx answers (`ApiError`).
pub fn spawn(
    listener: TcpListener,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<io::Result<()>> {
    if tracing::enabled!(target: "tower_http::trace", tracing::Level::DEBUG) {
        // Around the whole router, not with `Router::layer` (see `serve`).
        let app = ServiceBuilder::new()
            .layer(TraceLayer::new_for_http())
            .service(app);
        tokio::spawn(serve(listener, app, shutdown))
    } else {
        tokio::spawn(serve(listener, app, shutdown))
    }
}

/// Errors that concern one incoming connection (it was reset before it was accepted), not
/// the listener.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::Router;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;

    use super::*;

    /// A connection that never finishes its request head is closed at the deadline, while
    /// the server goes on answering others. (Paused time: the deadline passes at once.)
    #[tokio::test(start_paused = true)]
    async fn a_request_head_that_never_ends_is_cut_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = Router::new().route("/ok", get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, app, async {
            let _ = stopped.await;
        }));

        let mut slow = TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("write");
        let mut answer = Vec::new();
        let read = tokio::time::timeout(
            HEADER_READ_TIMEOUT + Duration::from_secs(5),
            slow.read_to_end(&mut answer),
        )
        .await;
        assert!(read.is_ok(), "the half-sent request was still open");
        // hyper answers a head that timed out with 408 before closing, or just closes.
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "{answer}"
        );

        let mut fine = TcpStream::connect(addr).await.expect("connect");
        fine.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut answer = Vec::new();
        fine.read_to_end(&mut answer).await.expect("read");
        assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));

        stop.send(()).expect("server running");
        server.await.expect("joined").expect("served");
    }
}
