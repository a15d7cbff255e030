//! The webhook target: a queue's deliveries as signed HTTP `POST`s to one
//! endpoint, following the Standard Webhooks convention.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::StatusCode;
use sha2::Sha256;

use crate::error::Error;
use crate::model::attempt::Task;
use crate::model::attempts::{Receipt, MAX_ATTEMPT_DETAIL};
use crate::model::clock::Clock;
use crate::model::failure::Failure;
use crate::targets::{headers, Delivered, Target};

/// How many bytes of an error response's body a failed attempt records.
const ERROR_BODY: usize = 256;

/// Delivers a queue's tasks as HTTP `POST`s to one endpoint, signed as the
/// [Standard Webhooks](https://www.standardwebhooks.com/) convention says.
/// Build one with [`Webhook::builder`] and bind it to a queue with
/// [`SchedulerBuilder::deliver`](crate::SchedulerBuilder::deliver).
///
/// The endpoint is the operator's, set here in code. A task may carry a
/// [`Destination`](crate::Destination) of its own (its URL, method and
/// headers); the webhook sends it there only when the URL is under one of
/// the prefixes given to [`allow_destinations`](WebhookBuilder::allow_destinations)
/// (none by default), and otherwise marks the task dead at once with the
/// reason, without a request: scheduling a task cannot make the scheduler
/// call an address the operator did not allow.
///
/// # The request
///
/// The body is the task's payload, with the [`content_type`](WebhookBuilder::content_type)
/// given (default `application/octet-stream`). The headers:
///
/// - `webhook-id`: [`Task::message_id`], the same in every attempt of one
///   run of the task (a receiver deduplicates on it) and new after a
///   redrive;
/// - `webhook-timestamp`: when this attempt was sent, in seconds since the
///   Unix epoch;
/// - `webhook-signature`: `v1,` and the base64 HMAC-SHA256, keyed with the
///   secret's bytes, of `{webhook-id}.{webhook-timestamp}.{body}`;
/// - the task's fields, as every target sends them
///   ([`crate::targets`]): `ttw-message-id`, `ttw-task-id`, `ttw-attempt`,
///   `ttw-queue`, `ttw-run-at` and `ttw-idempotency-key`.
///
/// Redirects are not followed, connections are kept and reused (up to
/// [`max_in_flight`](WebhookBuilder::max_in_flight) idle ones), and each
/// request ends after the [`timeout`](WebhookBuilder::timeout), from its
/// start to the end of the answer.
///
/// # What the answer means
///
/// | answer | outcome |
/// |---|---|
/// | any `2xx` | done |
/// | `429` or `503` with `Retry-After` (seconds, or an HTTP date) | a failed attempt; the next one at that time (at most [`MAX_RETRY_AFTER`](crate::MAX_RETRY_AFTER) away) instead of after the backoff |
/// | `410 Gone` | the task is dead at once: the endpoint says it will never take it ([`Store::redrive`](crate::Store::redrive) runs it again) |
/// | any other status (`3xx`, `4xx`, `5xx`), a timeout, a connection or protocol error | a failed attempt, retried after the scheduler's backoff; dead when out of attempts |
///
/// A failed attempt records the status and the first 256 bytes of the
/// answer's body (or the error) as the task's last error. Other `4xx` are
/// retried rather than taken as final because an endpoint's `404` or `401`
/// is as often a deployment in progress or a rotated credential as a
/// request that can never succeed; `max_attempts` bounds them, and the
/// dead task's last error says why.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::Webhook;
///
/// let hook = Webhook::builder("https://orders.example.com/hooks/expired")
///     .secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
///     .timeout(Duration::from_secs(5))
///     .max_in_flight(32)
///     .content_type("application/json")
///     .build()?;
/// assert_eq!(hook.url(), "https://orders.example.com/hooks/expired");
///
/// // Bad configuration is refused when built.
/// let err = Webhook::builder("ftp://example.com").secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").build();
/// assert!(err.unwrap_err().is_config());
/// # Ok::<_, ttw_durable::Error>(())
/// ```
#[derive(Clone)]
pub struct Webhook {
    inner: Arc<Inner>,
}

struct Inner {
    url: reqwest::Url,
    key: Vec<u8>,
    timeout: Duration,
    max_in_flight: usize,
    content_type: HeaderValue,
    client: reqwest::Client,
    /// The URL prefixes a task's destination may be under.
    destinations: Vec<String>,
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.inner.url.as_str())
            .field("timeout", &self.inner.timeout)
            .field("max_in_flight", &self.inner.max_in_flight)
            .finish_non_exhaustive()
    }
}

/// The settings of a [`Webhook`], from [`Webhook::builder`].
#[derive(Debug, Clone)]
pub struct WebhookBuilder {
    url: String,
    secret: Option<String>,
    timeout: Duration,
    max_in_flight: usize,
    content_type: String,
    destinations: Vec<String>,
}

impl Webhook {
    /// A webhook to `url` (`http` or `https`), with a 10 s timeout, 64
    /// requests in flight at most, and no secret yet (one is required).
    pub fn builder(url: impl Into<String>) -> WebhookBuilder {
        WebhookBuilder {
            url: url.into(),
            secret: None,
            timeout: Duration::from_secs(10),
            max_in_flight: 64,
            content_type: "application/octet-stream".to_string(),
            destinations: Vec::new(),
        }
    }

    /// The endpoint.
    pub fn url(&self) -> &str {
        self.inner.url.as_str()
    }

    /// The `webhook-signature` value of a message: `v1,` and the base64
    /// HMAC-SHA256 of `{id}.{timestamp}.{body}` under the secret.
    fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        sign(&self.inner.key, id, timestamp, body)
    }

    async fn post(self, task: Task) -> Result<Receipt, Failure> {
        let inner = &self.inner;
        let id = task.message_id();
        // A webhook is made apart from any store: the system's clock.
        let timestamp = Clock::System
            .now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut headers = HeaderMap::with_capacity(12);
        headers.insert(CONTENT_TYPE, inner.content_type.clone());
        let (url, method) = match task.envelope().and_then(|e| e.get_destination()) {
            None => (inner.url.clone(), reqwest::Method::POST),
            Some(to) => {
                let allowed = inner
                    .destinations
                    .iter()
                    .any(|prefix| crate::model::envelope::url_is_under(to.url(), prefix));
                let url = reqwest::Url::parse(to.url()).ok().filter(|_| allowed);
                let method = reqwest::Method::from_bytes(to.get_method().as_bytes()).ok();
                let (Some(url), Some(method)) = (url, method) else {
                    return Err(Failure::new(format!(
                        "destination {} is not under a prefix this webhook allows",
                        to.url()
                    ))
                    .permanent());
                };
                for (name, v) in to.headers() {
                    if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
                        headers.append(name, value(v.clone()));
                    }
                }
                (url, method)
            }
        };
        for (name, value) in headers_of(&task) {
            headers.insert(name, value);
        }
        let body = if method == reqwest::Method::GET {
            Vec::new()
        } else {
            task.into_payload()
        };
        let signature = self.sign(&id, timestamp, &body);
        headers.insert(
            HeaderName::from_static("webhook-timestamp"),
            HeaderValue::from(timestamp),
        );
        headers.insert(
            HeaderName::from_static("webhook-signature"),
            value(signature),
        );
        headers.insert(HeaderName::from_static("webhook-id"), value(id));
        let answer = inner
            .client
            .request(method, url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(|e| self.failed(&e))?;
        let status = answer.status();
        if status.is_success() {
            let text = error_body(answer, MAX_ATTEMPT_DETAIL).await;
            let receipt = Receipt::status(status.as_u16());
            return Ok(if text.is_empty() {
                receipt
            } else {
                receipt.answer(text)
            });
        }
        let retry_after = (status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::SERVICE_UNAVAILABLE)
            .then(|| answer.headers().get(RETRY_AFTER).and_then(retry_after))
            .flatten();
        let location = status
            .is_redirection()
            .then(|| answer.headers().get(reqwest::header::LOCATION).cloned())
            .flatten();
        let text = error_body(answer, ERROR_BODY).await;
        let mut message = format!("webhook answered HTTP {status}");
        if let Some(location) = location {
            message.push_str(&format!(
                " (redirect to {} not followed)",
                String::from_utf8_lossy(location.as_bytes())
            ));
        }
        if !text.is_empty() {
            message.push_str(": ");
            message.push_str(&text);
        }
        let failure = Failure::new(message).with_status(status.as_u16());
        Err(if status == StatusCode::GONE {
            failure.permanent()
        } else if let Some(wait) = retry_after {
            failure.retry_after(wait)
        } else {
            failure
        })
    }

    /// A failed attempt from a request that got no answer.
    fn failed(&self, err: &reqwest::Error) -> Failure {
        if err.is_timeout() {
            Failure::new(format!("webhook timed out after {:?}", self.inner.timeout))
        } else if err.is_connect() {
            Failure::new(format!("webhook connection failed: {}", error_chain(err)))
        } else {
            Failure::new(format!("webhook request failed: {}", error_chain(err)))
        }
    }
}

impl Target for Webhook {
    fn deliver(&self, task: Task) -> Delivered {
        Box::pin(self.clone().post(task))
    }

    fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    fn max_in_flight(&self) -> Option<usize> {
        Some(self.inner.max_in_flight)
    }
}

impl WebhookBuilder {
    /// The signing secret, in the convention's form: `whsec_` and the
    /// base64 of the key's bytes (between 24 and 64 bytes). Required.
    #[must_use]
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// How long one request may take, from its start to the end of the
    /// answer (default 10 s). It must be above zero, and `start` refuses
    /// one longer than the scheduler's `callback_timeout`.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most requests in flight at once from one node (default 64): the
    /// queue's `queue_concurrency` unless one is given. Above zero.
    #[must_use]
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }

    /// The body's `Content-Type` (default `application/octet-stream`).
    #[must_use]
    pub fn content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = content_type.into();
        self
    }

    /// The URL prefixes a task's own [`Destination`](crate::Destination)
    /// may be under (see [`url_is_under`](crate::url_is_under)); none by
    /// default, so that every task goes to the webhook's URL.
    #[must_use]
    pub fn allow_destinations<I, S>(mut self, prefixes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.destinations = prefixes.into_iter().map(Into::into).collect();
        self
    }

    /// The webhook.
    ///
    /// # Errors
    ///
    /// [`Error::is_config`], saying which setting is wrong: a URL that does
    /// not parse or is not `http` or `https`, a missing or malformed
    /// secret, a zero timeout or limit, a content type that is not a valid
    /// header value, or an HTTP client that cannot be built.
    pub fn build(self) -> Result<Webhook, Error> {
        let url = reqwest::Url::parse(&self.url)
            .map_err(|e| Error::config(format!("webhook URL '{}': {e}", self.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::config(format!(
                "webhook URL '{}': the scheme must be http or https, not {}",
                self.url,
                url.scheme()
            )));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(Error::config(format!(
                "webhook URL '{}' has no host",
                self.url
            )));
        }
        let key = match &self.secret {
            None => {
                return Err(Error::config(
                    "a webhook needs a signing secret (whsec_ and base64)",
                ))
            }
            Some(secret) => parse_secret(secret)?,
        };
        if self.timeout.is_zero() {
            return Err(Error::config("a webhook's timeout must be above zero"));
        }
        if self.max_in_flight == 0 {
            return Err(Error::config(
                "a webhook's max_in_flight must be above zero",
            ));
        }
        for prefix in &self.destinations {
            crate::model::envelope::check_url("a destination prefix", prefix)
                .map_err(|e| Error::config(e.to_string()))?;
        }
        let content_type = HeaderValue::from_str(&self.content_type).map_err(|_| {
            Error::config(format!(
                "webhook content type '{}' is not a valid header value",
                self.content_type
            ))
        })?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.timeout)
            .connect_timeout(self.timeout)
            .pool_max_idle_per_host(self.max_in_flight)
            .tcp_nodelay(true)
            .user_agent(concat!("ttw-durable/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::config(format!("webhook HTTP client: {e}")))?;
        Ok(Webhook {
            inner: Arc::new(Inner {
                url,
                key,
                timeout: self.timeout,
                max_in_flight: self.max_in_flight,
                content_type,
                client,
                destinations: self.destinations,
            }),
        })
    }
}

/// The key bytes of a `whsec_` secret.
/// Checks a delivery's signature as its receiver does, by the Standard
/// Webhooks convention: `signature` (the `webhook-signature` header: one
/// or more space-separated `v1,<base64>`) must hold the HMAC-SHA256, under
/// `secret`'s key, of `id` (`webhook-id`), `timestamp` (`webhook-timestamp`)
/// and the body, joined by dots. Compared in constant time. The receiver
/// should also refuse a timestamp far from its own clock (a replay).
///
/// # Errors
///
/// [`Error::is_config`] for a secret that is not `whsec_` and a key's
/// base64 (24 to 64 bytes).
///
/// # Examples
///
/// ```
/// let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
/// let body = br#"{"test": 2432232314}"#;
/// let signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
/// assert!(ttw_durable::verify_webhook(secret, id, "1614265330", body, signature)?);
/// assert!(!ttw_durable::verify_webhook(secret, id, "1614265331", body, signature)?);
/// # Ok::<(), ttw_durable::Error>(())
/// ```
pub fn verify_webhook(
    secret: &str,
    id: &str,
    timestamp: &str,
    body: &[u8],
    signature: &str,
) -> Result<bool, Error> {
    let key = parse_secret(secret)?;
    Ok(signature.split(' ').any(|candidate| {
        let Some(given) = candidate.strip_prefix("v1,") else {
            return false;
        };
        let Ok(given) = STANDARD.decode(given) else {
            return false;
        };
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.verify_slice(&given).is_ok()
    }))
}

fn parse_secret(secret: &str) -> Result<Vec<u8>, Error> {
    let encoded = secret.strip_prefix("whsec_").ok_or_else(|| {
        Error::config("a webhook secret must start with whsec_ (then the key's base64)")
    })?;
    let key = STANDARD
        .decode(encoded)
        .map_err(|e| Error::config(format!("a webhook secret's key is not base64: {e}")))?;
    if !(24..=64).contains(&key.len()) {
        return Err(Error::config(format!(
            "a webhook secret's key must be 24 to 64 bytes, not {}",
            key.len()
        )));
    }
    Ok(key)
}

/// `v1,` and the base64 HMAC-SHA256 of `{id}.{timestamp}.{body}` under `key`.
fn sign(key: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The task's identifying headers as HTTP headers; a value that is not a
/// valid header value (an idempotency key with a control character) is
/// sent percent-encoded.
fn headers_of(task: &Task) -> impl Iterator<Item = (HeaderName, HeaderValue)> {
    headers(task).into_iter().filter_map(|(name, v)| {
        let v = v?;
        Some((HeaderName::from_static(name), value(v)))
    })
}

/// `v` as a header value, percent-encoding what a header cannot hold.
fn value(v: String) -> HeaderValue {
    HeaderValue::try_from(v.clone()).unwrap_or_else(|_| {
        let mut out = String::with_capacity(v.len() * 3);
        for b in v.bytes() {
            if (0x20..0x7f).contains(&b) && b != b'%' {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        HeaderValue::try_from(out).expect("printable ASCII is a valid header value")
    })
}

/// A `Retry-After` value: whole seconds, or an HTTP date (from now).
fn retry_after(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(Clock::System.now()).unwrap_or_default())
}

/// The first `most` bytes of an answer's body at most, as text cut at a
/// character boundary (see [`text_prefix`](crate::model::attempts::text_prefix)),
/// empty if it cannot be read in time.
async fn error_body(mut answer: reqwest::Response, most: usize) -> String {
    let mut body = Vec::new();
    while body.len() < most {
        match answer.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    crate::model::attempts::text_prefix(&body, most)
        .trim()
        .to_string()
}

/// An error and its sources, one line.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The convention's example message, signed: the expected signature
    /// was computed independently with Python's `hmac` and `hashlib`.
    #[test]
    fn the_signature_matches_an_independent_implementation() {
        let key = parse_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            sign(
                &key,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    /// Each bad setting is refused with a config error naming it.
    #[test]
    fn bad_configuration_is_refused() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let refused = |b: WebhookBuilder, says: &str| {
            let err = b.build().unwrap_err();
            assert!(err.is_config(), "{err}");
            assert!(err.to_string().contains(says), "{err} should say {says:?}");
        };
        refused(
            Webhook::builder("ftp://x.example/").secret(secret),
            "http or https",
        );
        refused(Webhook::builder("not a url").secret(secret), "webhook URL");
        refused(
            Webhook::builder("http://x.example/"),
            "needs a signing secret",
        );
        refused(
            Webhook::builder("http://x.example/").secret("MfKQ9r8G"),
            "whsec_",
        );
        refused(
            Webhook::builder("http://x.example/").secret("whsec_***"),
            "base64",
        );
        refused(
            Webhook::builder("http://x.example/").secret("whsec_AAAA"),
            "24 to 64",
        );
        refused(
            Webhook::builder("http://x.example/")
                .secret(secret)
                .timeout(Duration::ZERO),
            "timeout",
        );
        refused(
            Webhook::builder("http://x.example/")
                .secret(secret)
                .max_in_flight(0),
            "max_in_flight",
        );
        refused(
            Webhook::builder("http://x.example/")
                .secret(secret)
                .content_type("a\nb"),
            "content type",
        );
        assert!(Webhook::builder("https://x.example/")
            .secret(secret)
            .build()
            .is_ok());
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let secs = HeaderValue::from_static("120");
        assert_eq!(retry_after(&secs), Some(Duration::from_secs(120)));
        let later = httpdate::fmt_http_date(Clock::System.now() + Duration::from_secs(90));
        let wait = retry_after(&HeaderValue::try_from(later).unwrap()).unwrap();
        assert!(
            (Duration::from_secs(88)..=Duration::from_secs(90)).contains(&wait),
            "{wait:?}"
        );
        let past = httpdate::fmt_http_date(Clock::System.now() - Duration::from_secs(90));
        assert_eq!(
            retry_after(&HeaderValue::try_from(past).unwrap()),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&HeaderValue::from_static("soon")), None);
    }

    #[test]
    fn a_value_a_header_cannot_hold_is_percent_encoded() {
        assert_eq!(value("order-42".into()), "order-42");
        assert_eq!(value("a\nb%".into()), "a%0Ab%25");
        assert_eq!(value("a\u{7f}".into()), "a%7F");
    }
}
