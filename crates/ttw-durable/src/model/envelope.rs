//! What a task carries beside its payload for the way it is delivered: a
//! destination of its own, the trace context of the request that
//! scheduled it, and the URLs told of its outcome. Kept with the task as
//! one JSON text (`envelope`), read back with each claim.

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::model::id::TaskId;

/// The most headers a [`Destination`] carries.
pub const MAX_DESTINATION_HEADERS: usize = 16;

/// The most bytes of an [`Envelope`] as stored (its JSON form).
pub const MAX_ENVELOPE: usize = 8 * 1024;

/// The methods a [`Destination`] may use.
const METHODS: [&str; 5] = ["POST", "PUT", "PATCH", "DELETE", "GET"];

/// Headers a destination may not set: the delivery's own (its signature,
/// its ids, the trace context) and those the HTTP client owns.
fn reserved_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.starts_with("webhook-")
        || name.starts_with("ttw-")
        || matches!(
            name.as_str(),
            "content-length"
                | "host"
                | "transfer-encoding"
                | "connection"
                | "traceparent"
                | "tracestate"
        )
}

/// Where one task is delivered, in place of its queue's webhook endpoint:
/// a URL, a method (`POST` unless told) and headers of its own. The
/// request is signed as every webhook delivery is, with the queue's
/// secret, and a [`Webhook`](crate::Webhook) sends it only to a URL under
/// one of the prefixes it was built to allow
/// ([`WebhookBuilder::allow_destinations`](crate::WebhookBuilder::allow_destinations)).
///
/// # Examples
///
/// ```
/// use ttw_durable::Destination;
///
/// let to = Destination::new("https://billing.internal/hooks/expire")
///     .method("PUT")
///     .header("x-tenant", "acme");
/// assert_eq!(to.url(), "https://billing.internal/hooks/expire");
/// assert_eq!(to.get_method(), "PUT");
/// assert_eq!(to.headers(), &[("x-tenant".to_string(), "acme".to_string())]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Destination {
    url: String,
    #[serde(default = "post", skip_serializing_if = "is_post")]
    method: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    headers: Vec<(String, String)>,
}

fn post() -> String {
    "POST".to_string()
}

fn is_post(method: &str) -> bool {
    method == "POST"
}

impl Destination {
    /// A `POST` to `url`, with no headers of its own.
    pub fn new(url: impl Into<String>) -> Destination {
        Destination {
            url: url.into(),
            method: post(),
            headers: Vec::new(),
        }
    }

    /// The method: `POST` (the default), `PUT`, `PATCH`, `DELETE` or `GET`
    /// (which sends no body), in any case.
    #[must_use]
    pub fn method(mut self, method: impl Into<String>) -> Self {
        self.method = method.into().to_ascii_uppercase();
        self
    }

    /// A header sent with the request (at most [`MAX_DESTINATION_HEADERS`];
    /// not `webhook-*`, `ttw-*`, the trace context's, nor those the HTTP
    /// client sets).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The method.
    pub fn get_method(&self) -> &str {
        &self.method
    }

    /// The headers, in the order given.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    fn check(&self) -> Result<(), Error> {
        check_url("the destination", &self.url)?;
        if !METHODS.contains(&self.method.as_str()) {
            return Err(Error::invalid_envelope(format!(
                "the destination's method {:?} is not one of POST, PUT, PATCH, DELETE, GET",
                self.method
            )));
        }
        if self.headers.len() > MAX_DESTINATION_HEADERS {
            return Err(Error::invalid_envelope(format!(
                "the destination has {} headers, more than {MAX_DESTINATION_HEADERS}",
                self.headers.len()
            )));
        }
        for (name, value) in &self.headers {
            let token = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return Err(Error::invalid_envelope(format!(
                    "the destination's header name {name:?} is not an HTTP token"
                )));
            }
            if reserved_header(name) {
                return Err(Error::invalid_envelope(format!(
                    "the destination may not set the header {name:?}"
                )));
            }
            if value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) {
                return Err(Error::invalid_envelope(format!(
                    "the destination's header {name:?} holds a control character"
                )));
            }
        }
        Ok(())
    }
}

/// A URL a delivery may go to: `http` or `https`, with a host and no
/// credentials.
pub(crate) fn check_url(what: &str, text: &str) -> Result<url::Url, Error> {
    let url = url::Url::parse(text)
        .map_err(|e| Error::invalid_envelope(format!("{what} {text:?} is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::invalid_envelope(format!(
            "{what} {text:?}: the scheme must be http or https"
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid_envelope(format!(
            "{what} {text:?} has no host"
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Error::invalid_envelope(format!(
            "{what} {text:?} has credentials in it"
        )));
    }
    Ok(url)
}

/// Whether `url` is under `prefix`: the same scheme, host and port, and a
/// path that begins with the prefix's (so `https://a.example/hooks/` allows
/// `https://a.example/hooks/x` and not `https://a.example.evil/hooks/x` nor
/// `https://a.example/other`). Neither may be a URL with credentials.
///
/// ```
/// use ttw_durable::url_is_under;
///
/// let prefix = "https://billing.internal/hooks/";
/// assert!(url_is_under("https://billing.internal/hooks/expire", prefix));
/// assert!(!url_is_under("https://billing.internal.evil/hooks/expire", prefix));
/// ```
pub fn url_is_under(url: &str, prefix: &str) -> bool {
    let (Ok(url), Ok(prefix)) = (check_url("the URL", url), check_url("the prefix", prefix)) else {
        return false;
    };
    url.scheme() == prefix.scheme()
        && url.host_str() == prefix.host_str()
        && url.port_or_known_default() == prefix.port_or_known_default()
        && url.path().starts_with(prefix.path())
}

/// A W3C `traceparent`: `00-` 32 hex digits `-` 16 hex digits `-` 2 hex
/// digits, lower case, with neither id all zeros.
fn check_traceparent(value: &str) -> Result<(), Error> {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let ok = parts.len() == 4
        && hex(parts[0], 2)
        && parts[0] != "ff"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1].bytes().any(|b| b != b'0')
        && parts[2].bytes().any(|b| b != b'0');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_trace_context(format!(
            "traceparent {value:?} is not a W3C trace context (00-<32 hex>-<16 hex>-<2 hex>)"
        )))
    }
}

/// What a task carries for its delivery beside its payload, all of it
/// optional: a [`Destination`] of its own, the W3C trace context of the
/// request that scheduled it (sent with every delivery, so that a trace
/// runs from the scheduling request to the handler hours later), and the
/// URLs told of its outcome.
///
/// # Callbacks
///
/// A task with a [`callback`](Envelope::callback) URL, once done, and one
/// with a [`failure_callback`](Envelope::failure_callback) URL, once dead,
/// makes a task of its own in the same transaction as the outcome: in the
/// same queue, due at once, with that URL as its [`Destination`], the
/// trace context of the task it tells of, and
/// [`outcome_of`](Envelope::outcome_of) naming it. Its payload is the
/// outcome as JSON:
///
/// ```json
/// {"id": 42, "queue": "billing", "kind": null, "state": "done", "attempts": 2,
///  "status": 200, "answer": "accepted", "error": null, "finished_at": 1767225600000}
/// ```
///
/// (`kind` is a typed job's, `status` and `answer` are the last answer's HTTP status and first
/// bytes, `error` a dead task's last error.) The queue's target delivers
/// it as any task with a destination: a [`Webhook`](crate::Webhook) signs
/// it with the queue's secret, sends the header `ttw-outcome-of`, and
/// retries it under the queue's policy, and its failure never touches the
/// outcome it tells of. A handler of the queue gets it as a task whose
/// envelope has `outcome_of`.
///
/// Given to [`Schedule::envelope`](crate::Schedule::envelope) or
/// [`NewTask::envelope`](crate::NewTask::envelope); read back by
/// [`Task::envelope`](crate::Task::envelope) and
/// [`TaskInfo::envelope`](crate::TaskInfo::envelope).
///
/// # Examples
///
/// ```
/// use ttw_durable::{Destination, Envelope};
///
/// let envelope = Envelope::new()
///     .destination(Destination::new("https://billing.internal/hooks/expire"))
///     .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// assert!(envelope.check().is_ok());
///
/// // A malformed trace context is refused.
/// let bad = Envelope::new().traceparent("00-abc-01");
/// let err = bad.check().unwrap_err();
/// assert!(err.is_invalid_trace_context() && err.is_invalid_envelope());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    destination: Option<Destination>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    callback: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure_callback: Option<String>,
    /// Set by the crate only, on the task that tells a callback URL of
    /// another task's outcome: that task's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outcome_of: Option<i64>,
}

impl Envelope {
    /// An empty envelope.
    pub fn new() -> Envelope {
        Envelope::default()
    }

    /// Delivered to `destination` rather than the queue's endpoint.
    #[must_use]
    pub fn destination(mut self, destination: Destination) -> Self {
        self.destination = Some(destination);
        self
    }

    /// The W3C `traceparent` of the request that scheduled the task.
    #[must_use]
    pub fn traceparent(mut self, value: impl Into<String>) -> Self {
        self.traceparent = Some(value.into());
        self
    }

    /// The W3C `tracestate` that goes with it (at most 512 bytes).
    #[must_use]
    pub fn tracestate(mut self, value: impl Into<String>) -> Self {
        self.tracestate = Some(value.into());
        self
    }

    /// Tells `url` of the task's outcome once it is done (see [Callbacks](Envelope#callbacks)).
    #[must_use]
    pub fn callback(mut self, url: impl Into<String>) -> Self {
        self.callback = Some(url.into());
        self
    }

    /// Tells `url` of the task's outcome once it is dead: out of attempts,
    /// or failed for good (see [Callbacks](Envelope#callbacks)).
    #[must_use]
    pub fn failure_callback(mut self, url: impl Into<String>) -> Self {
        self.failure_callback = Some(url.into());
        self
    }

    /// The URL told once the task is done, if any.
    pub fn get_callback(&self) -> Option<&str> {
        self.callback.as_deref()
    }

    /// The URL told once the task is dead, if any.
    pub fn get_failure_callback(&self) -> Option<&str> {
        self.failure_callback.as_deref()
    }

    /// On a task that tells a callback URL of another task's outcome, that
    /// task.
    pub fn outcome_of(&self) -> Option<TaskId> {
        self.outcome_of.map(TaskId)
    }

    /// The destination, if the task has one.
    pub fn get_destination(&self) -> Option<&Destination> {
        self.destination.as_ref()
    }

    /// The `traceparent`, if any.
    pub fn get_traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }

    /// The `tracestate`, if any.
    pub fn get_tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// Checks that a payload of `payload_len` bytes can go where it says:
    /// a `GET` destination sends no body, so a task with a payload and a
    /// `GET` destination is refused rather than delivered without its
    /// payload. (`DELETE` sends the payload as its body.)
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_envelope`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::{Destination, Envelope};
    ///
    /// let get = Envelope::new().destination(Destination::new("https://example.com/ping").method("GET"));
    /// assert!(get.check_payload(0).is_ok());
    /// assert!(get.check_payload(5).unwrap_err().is_invalid_envelope());
    /// let delete = Envelope::new().destination(Destination::new("https://example.com/x").method("DELETE"));
    /// assert!(delete.check_payload(5).is_ok());
    /// ```
    pub fn check_payload(&self, payload_len: usize) -> Result<(), Error> {
        match &self.destination {
            Some(to) if payload_len > 0 && to.method == "GET" => {
                Err(Error::invalid_envelope(format!(
                    "a GET destination sends no body, and the payload is {payload_len} bytes: \
                 send it with POST, PUT, PATCH or DELETE, or schedule no payload"
                )))
            }
            _ => Ok(()),
        }
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self == &Envelope::default()
    }

    /// Checks every field: URLs `http` or `https` with a host, a known
    /// method, headers that are tokens and not reserved, a well-formed
    /// trace context, and a size within [`MAX_ENVELOPE`].
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_envelope`], saying which field is wrong.
    pub fn check(&self) -> Result<(), Error> {
        // The trace context first: a request's own, before what it asks.
        if let Some(value) = &self.traceparent {
            check_traceparent(value)?;
        }
        if let Some(state) = &self.tracestate {
            if self.traceparent.is_none() {
                return Err(Error::invalid_trace_context(
                    "a tracestate needs a traceparent",
                ));
            }
            if state.len() > 512 || !state.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                return Err(Error::invalid_trace_context(
                    "tracestate must be at most 512 printable ASCII bytes",
                ));
            }
        }
        if let Some(destination) = &self.destination {
            destination.check()?;
        }
        if let Some(url) = &self.callback {
            check_url("the callback", url)?;
        }
        if let Some(url) = &self.failure_callback {
            check_url("the failure callback", url)?;
        }
        if self.encode().len() > MAX_ENVELOPE {
            return Err(Error::invalid_envelope(format!(
                "the envelope is longer than {MAX_ENVELOPE} bytes"
            )));
        }
        Ok(())
    }

    /// The form it is stored in.
    pub(crate) fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the stored form back.
    pub(crate) fn decode(text: &str) -> Result<Envelope, Error> {
        serde_json::from_str(text)
            .map_err(|e| Error::corrupt(format!("a task's envelope does not read: {e}")))
    }

    /// The stored form of an optional envelope: `None` when it is absent or
    /// empty.
    pub(crate) fn stored(envelope: Option<&Envelope>) -> Option<String> {
        envelope.filter(|e| !e.is_empty()).map(Envelope::encode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_reads_back_as_written() {
        let envelope = Envelope::new()
            .destination(
                Destination::new("https://a.example/x")
                    .method("patch")
                    .header("x-a", "1"),
            )
            .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .tracestate("vendor=abc")
            .callback("https://a.example/done")
            .failure_callback("https://a.example/dead");
        envelope.check().unwrap();
        assert_eq!(envelope.get_callback(), Some("https://a.example/done"));
        assert_eq!(envelope.outcome_of(), None);
        assert!(Envelope::new()
            .callback("ftp://a.example/x")
            .check()
            .unwrap_err()
            .is_invalid_envelope());
        assert_eq!(Envelope::decode(&envelope.encode()).unwrap(), envelope);
        assert_eq!(Envelope::stored(Some(&Envelope::new())), None);
        assert_eq!(
            Envelope::decode(r#"{"destination":{"url":"http://x"}}"#)
                .unwrap()
                .get_destination()
                .unwrap()
                .get_method(),
            "POST"
        );
    }

    #[test]
    fn a_url_is_under_a_prefix_only_on_its_host_port_and_path() {
        let prefix = "https://billing.internal/hooks/";
        assert!(url_is_under(
            "https://billing.internal/hooks/expire?x=1",
            prefix
        ));
        assert!(url_is_under("https://billing.internal:443/hooks/a", prefix));
        for url in [
            "https://billing.internal.evil/hooks/a",
            "https://billing.internal:8443/hooks/a",
            "http://billing.internal/hooks/a",
            "https://billing.internal/hook",
            "https://billing.internal/other/hooks/",
            "https://x@billing.internal/hooks/a",
            "not a url",
        ] {
            assert!(!url_is_under(url, prefix), "{url}");
        }
        assert!(url_is_under("http://127.0.0.1:9/any", "http://127.0.0.1:9"));
    }

    #[test]
    fn bad_fields_are_refused_each_with_its_reason() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cases = [
            (
                Envelope::new().destination(Destination::new("ftp://x/")),
                "scheme",
            ),
            (
                Envelope::new().destination(Destination::new("https://")),
                "empty host",
            ),
            (
                Envelope::new().destination(Destination::new("https://u:p@x/")),
                "credentials",
            ),
            (
                Envelope::new().destination(Destination::new("https://x/").method("TRACE")),
                "method",
            ),
            (
                Envelope::new()
                    .destination(Destination::new("https://x/").header("webhook-id", "1")),
                "may not set",
            ),
            (
                Envelope::new().destination(Destination::new("https://x/").header("a b", "1")),
                "token",
            ),
            (
                Envelope::new()
                    .destination(Destination::new("https://x/").header("a", "1\r\nb: 2")),
                "control",
            ),
            (
                Envelope::new()
                    .traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
                "W3C",
            ),
            (Envelope::new().traceparent(tp.to_uppercase()), "W3C"),
            (Envelope::new().tracestate("a=b"), "needs a traceparent"),
            (
                Envelope::new().destination(Destination::new("mailto:x@y")),
                "scheme",
            ),
            (
                Envelope::new().destination(Destination::new("x/y")),
                "not a URL",
            ),
            (
                Envelope::new().traceparent(tp).tracestate("x".repeat(513)),
                "512",
            ),
        ];
        for (envelope, why) in cases {
            let err = envelope.check().unwrap_err();
            assert!(err.is_invalid_envelope(), "{envelope:?}: {err}");
            assert!(err.to_string().contains(why), "{envelope:?}: {err}");
        }
        let many = (0..17).fold(Destination::new("https://x/"), |d, i| {
            d.header(format!("h{i}"), "v")
        });
        assert!(Envelope::new().destination(many).check().is_err());
    }
}
