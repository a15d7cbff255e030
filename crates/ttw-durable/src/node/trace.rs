//! The trace context a task was scheduled with, made the OpenTelemetry
//! parent of its delivery's span (feature `opentelemetry`): with an
//! exporter set up by the application (`tracing-opentelemetry`), the
//! delivery is a span of the scheduling request's trace, hours later.

use tracing::Span;

/// Makes the W3C `traceparent` (and `tracestate`) the remote parent of
/// `span`. The envelope was checked when the task was scheduled; a value
/// that does not read leaves the span a root.
pub(crate) fn adopt(span: &Span, traceparent: &str, tracestate: Option<&str>) {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let parts: Vec<&str> = traceparent.split('-').collect();
    let [_, trace, parent, flags] = parts.as_slice() else {
        return;
    };
    let (Ok(trace), Ok(parent), Ok(flags)) = (
        TraceId::from_hex(trace),
        SpanId::from_hex(parent),
        u8::from_str_radix(flags, 16),
    ) else {
        return;
    };
    let state = tracestate
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let remote = SpanContext::new(trace, parent, TraceFlags::new(flags), true, state);
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
}
