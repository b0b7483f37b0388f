//! Exporting traces to an OpenTelemetry collector over OTLP/HTTP (`colloquy serve
//! --otlp-endpoint`): the `tracing` spans of requests, engine steps, hook calls, store
//! commits and outward calls (`crate::request_spans`) become OpenTelemetry spans through
//! `tracing-opentelemetry`, sampled parent-based with a trace-id ratio at the root, batched,
//! and posted as protobuf or JSON. Nothing here runs unless export is asked for: without
//! it, no OpenTelemetry layer is installed and the spans stay disabled.
//!
//! The batch processor posts from its own thread, outside any async runtime, so the
//! exporter's HTTP client is the workspace's reqwest in its blocking form
//! ([`BlockingHttpClient`]), not a second reqwest.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The path OTLP/HTTP collectors take traces at, appended to an endpoint that lacks it.
pub const TRACES_PATH: &str = "/v1/traces";
/// How long one export POST may take before the batch is given up.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a shutdown waits for the last batch.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// The `service.name` of the exported spans.
pub const SERVICE_NAME: &str = "colloquy";

/// How traces are exported.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceExport {
    /// The collector's OTLP/HTTP traces URL (ending in [`TRACES_PATH`]).
    pub endpoint: String,
    /// How spans are encoded.
    pub protocol: OtlpProtocol,
    /// The share of new traces sampled, 0 to 1; a request that arrives with a
    /// `traceparent` follows its caller's decision instead.
    pub sample_ratio: f64,
}

/// How exported spans are encoded, as `OTEL_EXPORTER_OTLP_PROTOCOL` names them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `http/protobuf`: what collectors expect by default.
    #[default]
    Protobuf,
    /// `http/json`.
    Json,
}

/// What is wrong with an export setting, or why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TraceExportError {
    /// The endpoint is not an http or https URL.
    #[error("--otlp-endpoint {endpoint:?} is not an http(s) URL: {reason}")]
    Endpoint {
        /// As given.
        endpoint: String,
        /// Why not.
        reason: String,
    },
    /// An unknown protocol name.
    #[error("--otlp-protocol {0:?} is not one of http/protobuf, http/json")]
    Protocol(String),
    /// A sample ratio outside 0..=1, or not a number.
    #[error("--trace-sample {0:?} is not a ratio from 0 to 1 (e.g. 0.1)")]
    SampleRatio(String),
    /// The exporter or its HTTP client could not be built.
    #[error("the OTLP exporter could not be built: {0}")]
    Build(String),
}

impl FromStr for OtlpProtocol {
    type Err = TraceExportError;

    fn from_str(name: &str) -> Result<OtlpProtocol, TraceExportError> {
        match name {
            "http/protobuf" => Ok(OtlpProtocol::Protobuf),
            "http/json" => Ok(OtlpProtocol::Json),
            other => Err(TraceExportError::Protocol(other.to_owned())),
        }
    }
}

impl fmt::Display for OtlpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OtlpProtocol::Protobuf => "http/protobuf",
            OtlpProtocol::Json => "http/json",
        })
    }
}

/// Reads a `--trace-sample` ratio: a number from 0 to 1.
pub fn parse_sample_ratio(text: &str) -> Result<f64, TraceExportError> {
    match text.parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(TraceExportError::SampleRatio(text.to_owned())),
    }
}

/// The traces URL of a collector given by its base URL (`http://collector:4318`, as
/// `OTEL_EXPORTER_OTLP_ENDPOINT`) or by its full traces URL (`…/v1/traces`).
pub fn traces_url(endpoint: &str) -> Result<String, TraceExportError> {
    let invalid = |reason: String| TraceExportError::Endpoint {
        endpoint: endpoint.to_owned(),
        reason,
    };
    let url = reqwest::Url::parse(endpoint).map_err(|error| invalid(error.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid(
            "the scheme must be http or https, with a host".into(),
        ));
    }
    if url.path().ends_with(TRACES_PATH) {
        return Ok(url.to_string());
    }
    let base = url.as_str().trim_end_matches('/');
    Ok(format!("{base}{TRACES_PATH}"))
}

impl TraceExport {
    /// Builds the exporter and returns the `tracing` layer that feeds it, with the handle
    /// that flushes it at shutdown. Marks the process as exporting
    /// ([`colloquy_core::trace_origins::set_exporting`]), so conversations' origins are kept.
    pub fn install<S>(&self) -> Result<(impl Layer<S> + use<S>, ExportHandle), TraceExportError>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        let client = BlockingHttpClient::new()?;
        let protocol = match self.protocol {
            OtlpProtocol::Protobuf => Protocol::HttpBinary,
            OtlpProtocol::Json => Protocol::HttpJson,
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(self.endpoint.clone())
            .with_protocol(protocol)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|error| TraceExportError::Build(error.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                self.sample_ratio,
            ))))
            .with_resource(Resource::builder().with_service_name(SERVICE_NAME).build())
            .build();
        let tracer = provider.tracer(SERVICE_NAME);
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            // Code locations, thread ids and busy/idle times: attributes nobody asked for,
            // each paid for on every span.
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_level(false)
            .with_filter(tracing_subscriber::filter::filter_fn(exported));
        colloquy_core::trace_origins::set_exporting();
        Ok((layer, ExportHandle { provider }))
    }
}

/// What the OpenTelemetry layer sees: Colloquy's own spans (its crates' targets all start
/// with `colloquy`), and warnings and errors from anywhere, as events of the span they
/// happen in. Other crates' spans, and chattier events, stay out of the traces.
fn exported(metadata: &tracing::Metadata<'_>) -> bool {
    if metadata.is_span() {
        metadata.target().starts_with("colloquy")
    } else {
        *metadata.level() <= tracing::Level::WARN
    }
}

/// Flushes and stops the exporter.
#[derive(Debug)]
pub struct ExportHandle {
    provider: SdkTracerProvider,
}

impl ExportHandle {
    /// Exports the spans ended so far now, not at the batch's next tick. Blocks: call it
    /// off the async workers.
    pub fn flush(&self) -> Result<(), TraceExportError> {
        self.provider
            .force_flush()
            .map_err(|error| TraceExportError::Build(error.to_string()))
    }

    /// Exports what is left and stops, waiting at most [`SHUTDOWN_TIMEOUT`]. Blocks: call
    /// it once the server has stopped, off the async workers.
    pub fn shutdown(self) -> Result<(), TraceExportError> {
        self.provider
            .shutdown_with_timeout(SHUTDOWN_TIMEOUT)
            .map_err(|error| TraceExportError::Build(error.to_string()))
    }
}

/// reqwest's blocking client, as the OTLP exporter's HTTP client: the batch processor
/// calls it on its own thread.
#[derive(Debug)]
pub struct BlockingHttpClient(reqwest::blocking::Client);

impl BlockingHttpClient {
    /// Built on a thread of its own: reqwest's blocking client runs a small runtime inside,
    /// which may not be created or dropped on an async worker (where `install` may run).
    fn new() -> Result<BlockingHttpClient, TraceExportError> {
        std::thread::spawn(|| {
            reqwest::blocking::Client::builder()
                .timeout(EXPORT_TIMEOUT)
                .build()
        })
        .join()
        .map_err(|_| TraceExportError::Build("building the HTTP client panicked".into()))?
        .map(BlockingHttpClient)
        .map_err(|error| TraceExportError::Build(error.to_string()))
    }
}

#[async_trait::async_trait]
impl HttpClient for BlockingHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::blocking::Request::try_from(request.map(Vec::from))?;
        let response = self.0.execute(request)?;
        let mut answer = Response::builder().status(response.status());
        if let Some(headers) = answer.headers_mut() {
            *headers = response.headers().clone();
        }
        Ok(answer.body(response.bytes()?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_get_the_traces_path_once() {
        assert_eq!(
            traces_url("http://collector:4318").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example/v1/traces").unwrap(),
            "https://otel.example/v1/traces"
        );
        assert_eq!(
            traces_url("http://gateway/otlp").unwrap(),
            "http://gateway/otlp/v1/traces"
        );
    }

    #[test]
    fn bad_settings_are_named() {
        for bad in ["collector:4318", "ftp://collector/", "not a url", ""] {
            let error = traces_url(bad).unwrap_err().to_string();
            assert!(error.contains("--otlp-endpoint"), "{error}");
        }
        assert_eq!(
            "http/json".parse::<OtlpProtocol>().unwrap(),
            OtlpProtocol::Json
        );
        assert_eq!(
            "http/protobuf".parse::<OtlpProtocol>().unwrap(),
            OtlpProtocol::Protobuf
        );
        let error = "grpc".parse::<OtlpProtocol>().unwrap_err().to_string();
        assert!(error.contains("http/protobuf, http/json"), "{error}");
        assert_eq!(parse_sample_ratio("0.25").unwrap(), 0.25);
        assert_eq!(parse_sample_ratio("1").unwrap(), 1.0);
        for bad in ["1.5", "-0.1", "NaN", "half"] {
            assert!(parse_sample_ratio(bad).is_err(), "{bad}");
        }
    }
}
