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
    pub(crate) callback: Option<String>,
    pub(crate) failure_callback: Option<String>,
}

/// The envelope of a task of `queue` scheduled by `token`, `None` when the
/// request asked for nothing of it. Refusals: `invalid_destination` (a
/// malformed URL, method or header, of the target or a callback),
/// `destination_not_allowed` (a URL under none of the token's
/// `destinations`, or a target or callback in a queue not delivered by
/// webhook: a callback is a task of the same queue, delivered by its
/// webhook), `invalid_trace_context`.
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
        callback,
        failure_callback,
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
    let mut urls = Vec::new();
    if let Some(spec) = target {
        let mut to = Destination::new(spec.url.clone());
        if let Some(method) = spec.method {
            to = to.method(method);
        }
        for (name, value) in spec.headers {
            to = to.header(name, value);
        }
        envelope = envelope.destination(to);
        urls.push(("target", spec.url));
    }
    if let Some(url) = callback {
        envelope = envelope.callback(url.clone());
        urls.push(("callback", url));
    }
    if let Some(url) = failure_callback {
        envelope = envelope.failure_callback(url.clone());
        urls.push(("failure_callback", url));
    }
    envelope
        .check()
        .map_err(|err| Code::InvalidDestination.refuse(err.to_string()))?;
    for (field, url) in &urls {
        allowed(api, token, queue, field, url)?;
    }
    Ok((!envelope.is_empty()).then_some(envelope))
}

/// Whether `token` may have a task of `queue` call `url` (its `field`):
/// the queue is delivered by webhook here, and the URL is under one of
/// the token's `destinations`.
fn allowed(api: &Api, token: &Token, queue: &str, field: &str, url: &str) -> Answer<()> {
    let webhook = api
        .settings
        .queues
        .iter()
        .any(|q| q.name == queue && matches!(q.target, Some(TargetSettings::Webhook { .. })));
    if !webhook {
        return Err(Code::DestinationNotAllowed.refuse(format!(
            "queue {queue:?} is not delivered by webhook here: a task's own {field} needs one"
        )));
    }
    if !token
        .destinations
        .iter()
        .any(|prefix| url_is_under(url, prefix))
    {
        return Err(Code::DestinationNotAllowed.refuse(format!(
            "{field} {url:?} is under none of token {:?}'s destinations",
            token.name
        )));
    }
    Ok(())
}
