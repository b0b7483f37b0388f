//! The trace each conversation started in, kept in memory while traces are exported.
//!
//! The request that starts a conversation is one trace; its later messages arrive in traces
//! of their own (each agent's request). The engine step of each later message links to the
//! engine step of the start (the origin), and the pushes of the conversation's messages
//! (webhooks, A2A calls) are children of it, so one conversation can be followed across
//! engines from where it began. The origin is kept in this engine's memory and in the
//! conversation's `started` event (`trace`, a W3C `traceparent`): after a restart, or on
//! another engine node of a shared store, the engine that loads the conversation remembers
//! its origin again from there.
//!
//! Nothing is remembered unless trace export is on ([`set_exporting`]), and memory stays
//! bounded: two generations of at most [`GENERATION`] origins each, the older dropped whole
//! when the newer fills, so the origins of the most recent conversations are kept.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Origins per generation: with two generations, between this and twice this many of the
/// newest conversations are remembered, about 100 bytes each (the id and a span context).
pub const GENERATION: usize = 50_000;

/// Whether this process exports traces. Set once, at start-up, by whoever installs the
/// exporter; read on every start and message, so a relaxed load, and nothing else when off.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Marks this process as exporting traces, so origins are remembered from now on.
pub fn set_exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// Whether traces are exported (so spans and origins are worth the work).
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The OpenTelemetry span context of `span` (invalid when it is not exported).
pub fn context_of(span: &tracing::Span) -> SpanContext {
    span.context().span().span_context().clone()
}

/// `context` as a W3C `traceparent` (version 00), when it is valid.
pub fn traceparent(context: &SpanContext) -> Option<String> {
    context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    })
}

/// The span context a W3C `traceparent` names (as a remote parent), when it is one.
pub fn parse_traceparent(traceparent: &str) -> Option<SpanContext> {
    let mut parts = traceparent.split('-');
    let (Some("00"), Some(trace_id), Some(span_id), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let trace_id = opentelemetry::trace::TraceId::from_hex(trace_id).ok()?;
    let span_id = opentelemetry::trace::SpanId::from_hex(span_id).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        opentelemetry::trace::TraceFlags::new(flags),
        true,
        opentelemetry::trace::TraceState::default(),
    );
    context.is_valid().then_some(context)
}

/// Links `span` to the span its conversation started in.
pub fn link(span: &tracing::Span, origin: SpanContext) {
    span.add_link(origin);
}

/// The span contexts of the requests that started this engine's recent conversations.
#[derive(Debug, Default)]
pub struct TraceOrigins {
    generations: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    newer: HashMap<String, SpanContext>,
    older: HashMap<String, SpanContext>,
}

impl TraceOrigins {
    /// Remembers that `conversation_id` started in `origin`, unless an origin is known for
    /// it already (a start refused as a duplicate must not replace the first one's) or
    /// `origin` is not a valid span context (nothing was traced). Whether it was kept.
    pub fn remember(&self, conversation_id: &str, origin: SpanContext) -> bool {
        if !origin.is_valid() {
            return false;
        }
        let mut generations = self.lock();
        if generations.newer.contains_key(conversation_id)
            || generations.older.contains_key(conversation_id)
        {
            return false;
        }
        if generations.newer.len() >= GENERATION {
            generations.older = std::mem::take(&mut generations.newer);
        }
        generations.newer.insert(conversation_id.to_owned(), origin);
        true
    }

    /// Forgets `conversation_id`'s origin (its start failed after all).
    pub fn forget(&self, conversation_id: &str) {
        let mut generations = self.lock();
        generations.newer.remove(conversation_id);
        generations.older.remove(conversation_id);
    }

    /// Where `conversation_id` started, if this engine remembers it.
    pub fn origin(&self, conversation_id: &str) -> Option<SpanContext> {
        let generations = self.lock();
        generations
            .newer
            .get(conversation_id)
            .or_else(|| generations.older.get(conversation_id))
            .cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // A poisoned lock only means a panic elsewhere while it was held; each map is whole
        // after every single operation.
        self.generations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    use super::*;

    #[test]
    fn a_traceparent_reads_back_as_the_context_it_was_made_of() {
        let origin = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        );
        let text = traceparent(&origin).expect("a valid context");
        assert_eq!(
            text,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        let read = parse_traceparent(&text).expect("a traceparent");
        assert_eq!(
            (read.trace_id(), read.span_id(), read.trace_flags()),
            (origin.trace_id(), origin.span_id(), origin.trace_flags())
        );
        for garbled in [
            "",
            "00-zz-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(garbled).is_none(), "{garbled}");
        }
        assert!(traceparent(&SpanContext::empty_context()).is_none());
    }

    fn context(n: u64) -> SpanContext {
        SpanContext::new(
            TraceId::from(u128::from(n) + 1),
            SpanId::from(n + 1),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        )
    }

    #[test]
    fn remembers_and_forgets_the_oldest_generation() {
        let origins = TraceOrigins::default();
        origins.remember("first", context(0));
        assert_eq!(origins.origin("first"), Some(context(0)));
        assert_eq!(origins.origin("unknown"), None);
        // Filling a generation moves "first" to the older one: still remembered.
        for n in 1..GENERATION as u64 {
            origins.remember(&n.to_string(), context(n));
        }
        origins.remember("next", context(7));
        assert_eq!(origins.origin("first"), Some(context(0)));
        // Filling the next drops the older generation, "first" with it.
        for n in 1..GENERATION as u64 {
            origins.remember(&format!("later-{n}"), context(n));
        }
        origins.remember("last", context(9));
        assert_eq!(origins.origin("first"), None);
        assert_eq!(origins.origin("next"), Some(context(7)));
        assert_eq!(origins.origin("last"), Some(context(9)));
    }

    #[test]
    fn keeps_the_first_origin_until_forgotten() {
        let origins = TraceOrigins::default();
        assert!(origins.remember("c", context(1)));
        assert!(!origins.remember("c", context(2)));
        assert_eq!(origins.origin("c"), Some(context(1)));
        origins.forget("c");
        assert_eq!(origins.origin("c"), None);
        assert!(origins.remember("c", context(2)));
    }

    #[test]
    fn ignores_invalid_contexts() {
        let origins = TraceOrigins::default();
        origins.remember("untraced", SpanContext::empty_context());
        assert_eq!(origins.origin("untraced"), None);
    }
}
