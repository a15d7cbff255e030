//! The NATS JetStream target: a queue's deliveries published to a subject,
//! done once the stream acknowledges them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_nats::header::{HeaderMap, NATS_MESSAGE_ID};
use async_nats::jetstream::Context;

use crate::error::Error;
use crate::model::attempt::Task;
use crate::model::attempts::Receipt;
use crate::model::failure::Failure;
use crate::targets::{headers, Delivered, Target};

/// Publishes a queue's tasks to NATS JetStream. Build one with
/// [`JetStream::builder`] from a connected [`async_nats::Client`] (which
/// carries the server addresses, credentials and TLS) and bind it to a
/// queue with [`SchedulerBuilder::deliver`](crate::SchedulerBuilder::deliver).
///
/// # The message
///
/// The payload is the task's payload; the subject is the
/// [`subject`](JetStreamBuilder::subject) template with the task's fields
/// put in. The headers are the task's fields as every target sends them
/// ([`crate::targets`]), and `Nats-Msg-Id`: the
/// [`message_id_prefix`](JetStreamBuilder::message_id_prefix) (default
/// none) and [`Task::message_id`].
///
/// # When a task is done
///
/// A task is done only once the stream's publish acknowledgement arrives.
/// No acknowledgement within the [`timeout`](JetStreamBuilder::timeout)
/// (the server down, no stream on the subject, the stream refusing it) is
/// a failed attempt, retried after the scheduler's backoff.
///
/// # At least once, and one message per run
///
/// A task is delivered again if its outcome was not written after the
/// acknowledgement (the scheduler died in between, or lost the task's
/// shard). That repeat carries the same `Nats-Msg-Id`, so the stream
/// drops it as a duplicate if it arrives within the stream's duplicate
/// window (`duplicate_window`, 2 minutes by default): keep the window
/// longer than `callback_timeout + lock_grace` plus the time a restart
/// takes, and the stream holds one message per task. A deliberate
/// [redrive](crate::Store::redrive) is a new run with a new message id,
/// and so a new message. Give each database publishing into one stream
/// its own `message_id_prefix`: task ids are unique only within their
/// database.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use ttw_durable::{JetStream, Scheduler, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = async_nats::connect("nats://127.0.0.1:4222").await?;
/// let target = JetStream::builder(client)
///     .subject("orders.expired.{queue}")
///     .timeout(Duration::from_secs(5))
///     .build()?;
/// let store = Store::sqlite("tasks.db").await?;
/// let scheduler = Scheduler::builder(store)
///     .deliver("cancel-unpaid", target)
///     .start_queues()
///     .await?;
/// # scheduler.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct JetStream {
    inner: Arc<Inner>,
}

struct Inner {
    context: Context,
    subject: Vec<Part>,
    prefix: String,
    timeout: Duration,
    max_in_flight: usize,
}

impl fmt::Debug for JetStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JetStream")
            .field("subject", &self.inner.subject)
            .field("message_id_prefix", &self.inner.prefix)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

/// The settings of a [`JetStream`] target, from [`JetStream::builder`].
#[derive(Debug, Clone)]
pub struct JetStreamBuilder {
    client: async_nats::Client,
    subject: Option<String>,
    prefix: String,
    timeout: Duration,
    max_in_flight: usize,
}

/// A piece of a subject template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Queue,
    Id,
    Key,
}

impl JetStream {
    /// A target publishing through `client`, with a 5 s timeout and 1,024
    /// publishes in flight at most; the subject is required.
    pub fn builder(client: async_nats::Client) -> JetStreamBuilder {
        JetStreamBuilder {
            client,
            subject: None,
            prefix: String::new(),
            timeout: Duration::from_secs(5),
            max_in_flight: 1024,
        }
    }

    /// The subject `task` is published to.
    fn subject_of(&self, task: &Task) -> String {
        let mut subject = String::with_capacity(64);
        for part in &self.inner.subject {
            match part {
                Part::Text(text) => subject.push_str(text),
                Part::Queue => push_token(&mut subject, task.queue()),
                Part::Id => subject.push_str(&task.id().get().to_string()),
                Part::Key => push_token(&mut subject, task.idempotency_key().unwrap_or("")),
            }
        }
        subject
    }

    async fn publish(self, task: Task) -> Result<Receipt, Failure> {
        let inner = &self.inner;
        let subject = self.subject_of(&task);
        let mut map = HeaderMap::new();
        map.insert(
            NATS_MESSAGE_ID,
            format!("{}{}", inner.prefix, task.message_id()).as_str(),
        );
        for (name, value) in headers(&task) {
            if let Some(value) = value {
                map.insert(name, header_safe(&value).as_str());
            }
        }
        let payload = bytes::Bytes::from(task.into_payload());
        let publish = async {
            let ack = inner
                .context
                .publish_with_headers(subject.clone(), map, payload)
                .await
                .map_err(|e| Failure::new(format!("NATS publish to {subject}: {e}")))?;
            ack.await.map_err(|e| {
                Failure::new(format!("NATS publish to {subject} not acknowledged: {e}"))
            })
        };
        match tokio::time::timeout(inner.timeout, publish).await {
            Ok(Ok(ack)) => Ok(Receipt::none().answer(format!("{} #{}", ack.stream, ack.sequence))),
            Ok(Err(failure)) => Err(failure),
            Err(_) => Err(Failure::new(format!(
                "NATS publish to {subject} not acknowledged within {:?}",
                inner.timeout
            ))),
        }
    }
}

impl Target for JetStream {
    fn deliver(&self, task: Task) -> Delivered {
        Box::pin(self.clone().publish(task))
    }

    fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    fn max_in_flight(&self) -> Option<usize> {
        Some(self.inner.max_in_flight)
    }
}

impl JetStreamBuilder {
    /// The subject each task is published to: text, with `{queue}`, `{id}`
    /// (the task's id) and `{key}` (its idempotency key) put in. A field's
    /// characters that a subject token cannot hold (`.`, `*`, `>`,
    /// whitespace) become `_`, as does a missing key. Required.
    #[must_use]
    pub fn subject(mut self, template: impl Into<String>) -> Self {
        self.subject = Some(template.into());
        self
    }

    /// Put before [`Task::message_id`] in `Nats-Msg-Id` (default none):
    /// one per database, where several publish into one stream.
    #[must_use]
    pub fn message_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long a publish may wait for its acknowledgement (default 5 s).
    /// Above zero; `start` refuses one longer than the scheduler's
    /// `callback_timeout`.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most publishes awaiting acknowledgement at once from one node
    /// (default 1,024): the queue's `queue_concurrency` unless one is
    /// given. Above zero.
    #[must_use]
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }

    /// The target.
    ///
    /// # Errors
    ///
    /// [`Error::is_config`], saying which setting is wrong: no subject, a
    /// subject template that is empty, holds whitespace or a wildcard, or
    /// names an unknown field, a prefix with whitespace, a zero timeout or
    /// limit.
    pub fn build(self) -> Result<JetStream, Error> {
        let template = self
            .subject
            .ok_or_else(|| Error::config("a JetStream target needs a subject"))?;
        let subject = parse_subject(&template)?;
        if self
            .prefix
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(Error::config(
                "a JetStream message id prefix cannot hold whitespace",
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::config(
                "a JetStream target's timeout must be above zero",
            ));
        }
        if self.max_in_flight == 0 {
            return Err(Error::config(
                "a JetStream target's max_in_flight must be above zero",
            ));
        }
        let mut context = async_nats::jetstream::new(self.client);
        context.set_timeout(self.timeout);
        Ok(JetStream {
            inner: Arc::new(Inner {
                context,
                subject,
                prefix: self.prefix,
                timeout: self.timeout,
                max_in_flight: self.max_in_flight,
            }),
        })
    }
}

/// A subject template's parts.
fn parse_subject(template: &str) -> Result<Vec<Part>, Error> {
    let refuse = |why: &str| {
        Err(Error::config(format!(
            "JetStream subject '{template}': {why}"
        )))
    };
    if template.is_empty() {
        return refuse("empty");
    }
    if template
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return refuse("a subject cannot hold whitespace");
    }
    if template.split('.').any(|t| t == "*" || t == ">") {
        return refuse("a subject to publish to cannot hold a wildcard");
    }
    if template.split('.').any(str::is_empty) {
        return refuse("a subject cannot have an empty token");
    }
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            parts.push(Part::Text(rest[..open].to_string()));
        }
        let Some(close) = rest[open..].find('}') else {
            return refuse("a '{' is not closed");
        };
        parts.push(match &rest[open + 1..open + close] {
            "queue" => Part::Queue,
            "id" => Part::Id,
            "key" => Part::Key,
            other => {
                return refuse(&format!(
                    "unknown field {{{other}}} (there are {{queue}}, {{id}} and {{key}})"
                ))
            }
        });
        rest = &rest[open + close + 1..];
    }
    if rest.contains('}') {
        return refuse("a '}' was never opened");
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_string()));
    }
    Ok(parts)
}

/// `field` as part of one subject token.
fn push_token(subject: &mut String, field: &str) {
    if field.is_empty() {
        subject.push('_');
    }
    for c in field.chars() {
        subject.push(match c {
            '.' | '*' | '>' => '_',
            c if c.is_whitespace() || c.is_control() => '_',
            c => c,
        });
    }
}

/// `value` with what a NATS header value cannot hold (line breaks)
/// replaced.
fn header_safe(value: &str) -> String {
    value.replace(['\r', '\n'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_template_is_parsed_or_refused() {
        assert_eq!(
            parse_subject("tasks.{queue}.{id}").unwrap(),
            vec![
                Part::Text("tasks.".into()),
                Part::Queue,
                Part::Text(".".into()),
                Part::Id
            ]
        );
        assert_eq!(
            parse_subject("due").unwrap(),
            vec![Part::Text("due".into())]
        );
        for (bad, says) in [
            ("", "empty"),
            ("a b", "whitespace"),
            ("tasks.*", "wildcard"),
            ("tasks.>", "wildcard"),
            ("tasks..x", "empty token"),
            ("tasks.{queue", "not closed"),
            ("tasks.{payload}", "unknown field"),
            ("tasks.queue}", "never opened"),
        ] {
            let err = parse_subject(bad).unwrap_err();
            assert!(
                err.is_config() && err.to_string().contains(says),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_field_becomes_one_subject_token() {
        let mut s = String::new();
        push_token(&mut s, "order.42 *x>");
        assert_eq!(s, "order_42__x_");
        let mut s = String::new();
        push_token(&mut s, "");
        assert_eq!(s, "_");
    }
}
