//! What a task carries beside its payload, from a request: its own
//! `target` and its trace context, checked against the token's
//! `destinations` before anything is written.

use ttw_durable::{url_is_under, Destination, Envelope};

use super::super::config::{TargetSettings, Token};
use super::super::refusal::{Answer, Code};
use super::super::wire::TargetSpec;
use super::Api;

/// The fields of a request that make an envelope.
pub(crate) struct Asked {
    pub(crate) target: Option<TargetSpec>,
    pub(crate) traceparent: Option<String>,
    pub(crate) tracestate: Option<String>,
}

/// The envelope of a task of `queue` scheduled by `token`, `None` when the
/// request asked for nothing of it. Refusals: `invalid_destination` (a
/// malformed URL, method or header), `destination_not_allowed` (a URL under
/// none of the token's `destinations`, or a `target` in a queue not
/// delivered by webhook), `invalid_trace_context`.
pub(crate) fn check(
    api: &Api,
    token: &Token,
    queue: &str,
    asked: Asked,
) -> Answer<Option<Envelope>> {
    let Asked {
        target,
        traceparent,
        tracestate,
    } = asked;
    // The trace context on its own first, so that its refusal has its code.
    let mut trace = Envelope::new();
    if let Some(value) = traceparent {
        trace = trace.traceparent(value);
    }
    if let Some(value) = tracestate {
        trace = trace.tracestate(value);
    }
    trace
        .check()
        .map_err(|err| Code::InvalidTraceContext.refuse(err.to_string()))?;

    let mut envelope = trace;
    let Some(spec) = target else {
        return Ok((!envelope.is_empty()).then_some(envelope));
    };
    let mut to = Destination::new(spec.url.clone());
    if let Some(method) = spec.method {
        to = to.method(method);
    }
    for (name, value) in spec.headers {
        to = to.header(name, value);
    }
    envelope = envelope.destination(to);
    envelope
        .check()
        .map_err(|err| Code::InvalidDestination.refuse(err.to_string()))?;
    let webhook = api
        .settings
        .queues
        .iter()
        .any(|q| q.name == queue && matches!(q.target, Some(TargetSettings::Webhook { .. })));
    if !webhook {
        return Err(Code::DestinationNotAllowed.refuse(format!(
            "queue {queue:?} is not delivered by webhook here: a task's own target needs one"
        )));
    }
    if !token
        .destinations
        .iter()
        .any(|prefix| url_is_under(&spec.url, prefix))
    {
        return Err(Code::DestinationNotAllowed.refuse(format!(
            "target {:?} is under none of token {:?}'s destinations",
            spec.url, token.name
        )));
    }
    Ok((!envelope.is_empty()).then_some(envelope))
}
