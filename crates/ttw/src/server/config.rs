//! The configuration file of `ttw server` (TOML), and what it resolves to:
//! secrets are read from the environment variables the file names, never
//! from the file itself.
//!
//! ```toml
//! listen = "127.0.0.1:8080"
//! database = "tasks.db"            # or postgres://...; DATABASE_URL if absent
//!                                   # (several hosts: postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write)
//! # schema = "ttw"                 # PostgreSQL only
//! # sqlite_commits = "synced"      # SQLite only: "flushed" (default) survives a killed
//!                                   # process, "synced" a power cut too
//! # max_body_bytes = 2097152
//! # shutdown_grace = "30s"
//!
//! [scheduler]                       # this instance is a node (default)
//! enabled = true
//! max_concurrency = 1024
//! # node_id = "ttw-1"               # stable ids let a restart take back at once
//! # heartbeat = "2s"
//! # lease_ttl = "10s"
//! # callback_timeout = "60s"
//! # lock_grace = "10s"
//!
//! [[queues]]
//! name = "emails"
//! webhook = { url = "https://mail.internal/hook", secret_env = "TTW_EMAILS_SECRET" }
//!
//! [[queues]]
//! name = "orders"
//! nats = { url = "nats://127.0.0.1:4222", subject = "tasks.{queue}" }
//!
//! [[queues]]
//! name = "reports"                  # no target: served by library users
//!
//! [[queues]]
//! name = "thumbnails"
//! pull = true                       # workers claim its due tasks (POST /v1/queues/thumbnails/claim)
//!
//! [console]                         # the operator's console at /console/ on this listener
//!                                   # (and /metrics for Prometheus, with a `read` token)
//! # enabled = true                  # (on by default; every action needs a token)
//! # stats_every = "10s"             # how often its charts sample this node (an hour kept)
//!
//! [[tokens]]
//! name = "checkout"
//! secret_env = "TTW_TOKEN_CHECKOUT"
//! scopes = ["schedule", "read"]    # or admin; consume to claim a pull queue's tasks
//! queues = ["orders"]               # optional: only these queues
//! # destinations = ["https://billing.internal/hooks/"]  # URL prefixes its tasks'
//!                                   # own `target` may be under (none by default)
//! ```

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use ttw_durable::Commits;

use crate::error::{fail, Failure, Result};

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    listen: Option<SocketAddr>,
    database: Option<String>,
    schema: Option<String>,
    sqlite_commits: Option<String>,
    max_body_bytes: Option<usize>,
    shutdown_grace: Option<String>,
    #[serde(default)]
    scheduler: SchedulerFile,
    #[serde(default)]
    queues: Vec<QueueFile>,
    #[serde(default)]
    tokens: Vec<TokenFile>,
    /// Refused with what replaced it (see [`load`]).
    dashboard: Option<toml::Value>,
    #[serde(default)]
    console: ConsoleFile,
}

/// `[console]`: the console on the API's own listener.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsoleFile {
    #[serde(default = "yes")]
    enabled: bool,
    stats_every: Option<String>,
}

impl Default for ConsoleFile {
    fn default() -> ConsoleFile {
        ConsoleFile {
            enabled: true,
            stats_every: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SchedulerFile {
    #[serde(default = "yes")]
    enabled: bool,
    max_concurrency: Option<usize>,
    node_id: Option<String>,
    heartbeat: Option<String>,
    lease_ttl: Option<String>,
    callback_timeout: Option<String>,
    lock_grace: Option<String>,
}

impl Default for SchedulerFile {
    fn default() -> Self {
        SchedulerFile {
            enabled: true,
            max_concurrency: None,
            node_id: None,
            heartbeat: None,
            lease_ttl: None,
            callback_timeout: None,
            lock_grace: None,
        }
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueFile {
    name: String,
    webhook: Option<WebhookFile>,
    nats: Option<NatsFile>,
    #[serde(default)]
    pull: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookFile {
    url: String,
    secret_env: Option<String>,
    timeout: Option<String>,
    max_in_flight: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NatsFile {
    url: String,
    subject: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    name: String,
    secret_env: String,
    scopes: Vec<Scope>,
    queues: Option<Vec<String>>,
    #[serde(default)]
    destinations: Vec<String>,
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Scope {
    /// Schedule, cancel and reschedule tasks.
    Schedule,
    /// Read tasks and counts.
    Read,
    /// Everything, in every queue.
    Admin,
    /// Claim a pull queue's tasks, and ack, nack and extend the claims.
    Consume,
}

/// The settings, checked, with their secrets.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) listen: SocketAddr,
    pub(crate) database: String,
    pub(crate) schema: Option<String>,
    /// SQLite only: when a commit reaches the disk.
    pub(crate) sqlite_commits: Commits,
    pub(crate) max_body_bytes: usize,
    pub(crate) shutdown_grace: Duration,
    pub(crate) scheduler: bool,
    pub(crate) max_concurrency: Option<usize>,
    pub(crate) node: NodeSettings,
    pub(crate) queues: Vec<Queue>,
    pub(crate) tokens: Vec<std::sync::Arc<Token>>,
    /// The console at `/console/`, unless `[console]` turns it off.
    pub(crate) console: bool,
    /// How often the console's charts sample this node's counters.
    pub(crate) stats_every: Duration,
}

/// The scheduler's timings, where the file sets them (the scheduler's
/// defaults otherwise); the scheduler checks them together at start.
#[derive(Debug, Default)]
pub(crate) struct NodeSettings {
    pub(crate) node_id: Option<String>,
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) lease_ttl: Option<Duration>,
    pub(crate) callback_timeout: Option<Duration>,
    pub(crate) lock_grace: Option<Duration>,
}

/// A queue this service knows, and where its tasks go.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) name: String,
    pub(crate) target: Option<TargetSettings>,
}

/// Where a queue's tasks are delivered.
#[derive(Debug)]
pub(crate) enum TargetSettings {
    Webhook {
        url: String,
        secret: Option<String>,
        timeout: Option<Duration>,
        max_in_flight: Option<usize>,
    },
    Nats {
        url: String,
        subject: Option<String>,
    },
    /// A pull queue: its due tasks wait for workers to claim them.
    Pull,
}

/// A bearer token and what it may do.
#[derive(Debug)]
pub(crate) struct Token {
    pub(crate) name: String,
    pub(crate) secret: String,
    pub(crate) scopes: BTreeSet<Scope>,
    /// `None`: every queue.
    pub(crate) queues: Option<BTreeSet<String>>,
    /// The URL prefixes a task's own `target` may be under
    /// (see [`ttw_durable::url_is_under`]): none by default.
    pub(crate) destinations: Vec<String>,
}

/// The request body limit unless the file sets one: a payload of
/// `MAX_PAYLOAD` (1 MiB) in base64, with room for the other fields.
const DEFAULT_MAX_BODY: usize = 2 << 20;

/// Reads and checks the file at `path`; `env` reads an environment variable
/// (the process's, in the binary).
pub(crate) fn load(path: &Path, env: impl Fn(&str) -> Option<String>) -> Result<Settings> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| Failure(format!("cannot read {}: {err}", path.display())))?;
    let file: File = toml::from_str(&text).map_err(|err| {
        Failure(format!(
            "{}: {}",
            path.display(),
            err.to_string().trim().replace('\n', " ")
        ))
    })?;
    resolve(file, env)
}

/// What a file that still has a `[dashboard]` is told.
pub(crate) const DASHBOARD_GONE: &str = "[dashboard] is gone: everything it showed is in the console, at /console/ on the API's own `listen`, and /metrics is served there too (with a token of scope `read`); remove the section";

fn secret(env: &impl Fn(&str) -> Option<String>, var: &str, what: &str) -> Result<String> {
    match env(var) {
        Some(value) if !value.is_empty() => Ok(value),
        _ => fail(format!("{what}: the environment variable {var} is not set")),
    }
}

/// The store's rule for a queue's name (`ttw_durable`'s `MAX_QUEUE_NAME`
/// bytes of ASCII letters, digits, `_`, `-`, `.` and `:`), checked when the
/// file is read rather than when the first task arrives.
fn check_queue_name(name: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':');
    if name.is_empty() || name.len() > ttw_durable::MAX_QUEUE_NAME || !name.chars().all(allowed) {
        return fail(format!(
            "queue {name:?}: a name is 1 to {} ASCII letters, digits, '_', '-', '.' and ':'",
            ttw_durable::MAX_QUEUE_NAME
        ));
    }
    Ok(())
}

fn resolve(file: File, env: impl Fn(&str) -> Option<String>) -> Result<Settings> {
    if file.dashboard.is_some() {
        return fail(DASHBOARD_GONE);
    }
    let database = match file.database.or_else(|| env("DATABASE_URL")) {
        Some(db) if !db.is_empty() => db,
        _ => return fail("no database: set `database` in the file, or DATABASE_URL"),
    };
    let postgres = database.starts_with("postgres://") || database.starts_with("postgresql://");
    let sqlite_commits = match &file.sqlite_commits {
        Some(_) if postgres => {
            return fail("sqlite_commits: for a SQLite database; PostgreSQL's commits are its own setting (synchronous_commit)")
        }
        Some(text) => text
            .parse()
            .map_err(|err| Failure(format!("sqlite_commits: {err}")))?,
        None => Commits::default(),
    };
    let shutdown_grace = match &file.shutdown_grace {
        Some(text) => {
            crate::parse::duration(text).map_err(|err| Failure(format!("shutdown_grace: {err}")))?
        }
        None => Duration::from_secs(30),
    };
    let duration = |name: &str, text: &Option<String>| -> Result<Option<Duration>> {
        text.as_ref()
            .map(|t| {
                crate::parse::duration(t).map_err(|err| Failure(format!("scheduler.{name}: {err}")))
            })
            .transpose()
    };
    let node = NodeSettings {
        node_id: file.scheduler.node_id.clone(),
        heartbeat: duration("heartbeat", &file.scheduler.heartbeat)?,
        lease_ttl: duration("lease_ttl", &file.scheduler.lease_ttl)?,
        callback_timeout: duration("callback_timeout", &file.scheduler.callback_timeout)?,
        lock_grace: duration("lock_grace", &file.scheduler.lock_grace)?,
    };
    let max_body_bytes = file.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY);
    if max_body_bytes < 1024 {
        return fail("max_body_bytes: at least 1024");
    }
    if file.scheduler.max_concurrency == Some(0) {
        return fail("scheduler.max_concurrency: at least 1");
    }
    let mut names = BTreeSet::new();
    let mut queues = Vec::new();
    for q in file.queues {
        check_queue_name(&q.name)?;
        if !names.insert(q.name.clone()) {
            return fail(format!("queue {:?} is named twice", q.name));
        }
        if q.pull && (q.webhook.is_some() || q.nats.is_some()) {
            return fail(format!(
                "queue {:?}: a pull queue has no webhook or nats target (a queue is push or pull)",
                q.name
            ));
        }
        let target = match (q.webhook, q.nats) {
            _ if q.pull => Some(TargetSettings::Pull),
            (Some(_), Some(_)) => {
                return fail(format!(
                    "queue {:?}: a webhook or nats target, not both",
                    q.name
                ))
            }
            (Some(w), None) => {
                if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
                    return fail(format!(
                        "queue {:?}: webhook url {:?} is not an http:// or https:// URL",
                        q.name, w.url
                    ));
                }
                let secret = match &w.secret_env {
                    Some(var) => Some(secret(&env, var, &format!("queue {:?} webhook", q.name))?),
                    None => None,
                };
                let timeout = match &w.timeout {
                    Some(text) => Some(crate::parse::duration(text).map_err(|err| {
                        Failure(format!("queue {:?}: webhook timeout: {err}", q.name))
                    })?),
                    None => None,
                };
                Some(TargetSettings::Webhook {
                    url: w.url,
                    secret,
                    timeout,
                    max_in_flight: w.max_in_flight,
                })
            }
            (None, Some(n)) => Some(TargetSettings::Nats {
                url: n.url,
                subject: n.subject,
            }),
            (None, None) => None,
        };
        queues.push(Queue {
            name: q.name,
            target,
        });
    }
    if queues.is_empty() {
        queues.push(Queue {
            name: ttw_durable::DEFAULT_QUEUE.to_string(),
            target: None,
        });
    }
    if file.tokens.is_empty() {
        return fail("no [[tokens]]: every API call needs a bearer token");
    }
    let mut tokens: Vec<std::sync::Arc<Token>> = Vec::new();
    for t in file.tokens {
        if t.scopes.is_empty() {
            return fail(format!("token {:?}: no scopes", t.name));
        }
        let value = secret(&env, &t.secret_env, &format!("token {:?}", t.name))?;
        if value.len() < 16 {
            return fail(format!(
                "token {:?}: {} holds fewer than 16 characters",
                t.name, t.secret_env
            ));
        }
        if tokens.iter().any(|other| other.secret == value) {
            return fail(format!(
                "token {:?}: the same secret as another token",
                t.name
            ));
        }
        let queues = match t.queues {
            Some(list) => {
                for q in &list {
                    if !queues.iter().any(|known| &known.name == q) {
                        return fail(format!("token {:?}: unknown queue {q:?}", t.name));
                    }
                }
                Some(list.into_iter().collect())
            }
            None => None,
        };
        for prefix in &t.destinations {
            if !ttw_durable::url_is_under(prefix, prefix) {
                return fail(format!(
                    "token {:?}: destination {prefix:?} is not an http or https URL with a host",
                    t.name
                ));
            }
        }
        tokens.push(std::sync::Arc::new(Token {
            name: t.name,
            secret: value,
            scopes: t.scopes.into_iter().collect(),
            queues,
            destinations: t.destinations,
        }));
    }
    let stats_every = match &file.console.stats_every {
        Some(text) => crate::parse::duration(text)
            .map_err(|err| Failure(format!("console.stats_every: {err}")))?,
        None => Duration::from_secs(10),
    };
    if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&stats_every) {
        return fail("console.stats_every: 1s to 10m");
    }
    Ok(Settings {
        console: file.console.enabled,
        stats_every,
        listen: file
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
        database,
        schema: file.schema,
        sqlite_commits,
        max_body_bytes,
        shutdown_grace,
        scheduler: file.scheduler.enabled,
        max_concurrency: file.scheduler.max_concurrency,
        node,
        queues,
        tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, vars: &[(&str, &str)]) -> Result<Settings> {
        let file: File = toml::from_str(text).map_err(|err| Failure(err.to_string()))?;
        resolve(file, |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    const TOKEN: &str = r#"
        [[tokens]]
        name = "app"
        secret_env = "T"
        scopes = ["schedule", "read"]
    "#;

    #[test]
    fn a_good_file_resolves_with_its_secrets() {
        let text = format!(
            r#"database = "x.db"
            [[queues]]
            name = "hooks"
            webhook = {{ url = "http://127.0.0.1:9/h", secret_env = "S" }}
            {TOKEN}"#
        );
        let s = parse(&text, &[("T", "0123456789abcdef"), ("S", "whsec_x")]).unwrap();
        assert_eq!(s.queues.len(), 1);
        assert!(matches!(
            &s.queues[0].target,
            Some(TargetSettings::Webhook { secret: Some(secret), .. }) if secret == "whsec_x"
        ));
        assert_eq!(s.tokens[0].scopes.len(), 2);
        assert!(s.scheduler);
        assert_eq!(s.sqlite_commits, Commits::Flushed);
        let synced = parse(
            &format!("database = \"x.db\"\nsqlite_commits = \"synced\"\n{TOKEN}"),
            &[("T", "0123456789abcdef")],
        )
        .unwrap();
        assert_eq!(synced.sqlite_commits, Commits::Synced);
    }

    #[test]
    fn what_is_wrong_is_named() {
        let cases: &[(&str, &str)] = &[
            ("database = \"x.db\"\n", "no [[tokens]]"),
            (
                "database = \"x.db\"\n[[tokens]]\nname = \"a\"\nsecret_env = \"NOPE\"\nscopes = [\"read\"]\n",
                "NOPE is not set",
            ),
            (
                "database = \"x.db\"\n[[queues]]\nname = \"q\"\nwebhook = { url = \"ftp://x\" }\n",
                "not an http",
            ),
            (
                "database = \"x.db\"\n[[queues]]\nname = \"q\"\n[[queues]]\nname = \"q\"\n",
                "named twice",
            ),
            ("", "no database"),
            (
                "database = \"x.db\"\nsqlite_commits = \"often\"\n[[queues]]\nname = \"q\"\n",
                "`often` is neither `flushed`",
            ),
            (
                "database = \"postgres://u@h1,h2/d\"\nsqlite_commits = \"synced\"\n[[queues]]\nname = \"q\"\n",
                "sqlite_commits: for a SQLite database",
            ),
            (
                "database = \"x.db\"\n[[queues]]\nname = \"q\"\n[dashboard]\nrefresh = \"10ms\"\n",
                DASHBOARD_GONE,
            ),
            (
                "database = \"x.db\"\n[[queues]]\nname = \"q\"\n[dashboard]\nlisten = \"127.0.0.1:9090\"\n",
                DASHBOARD_GONE,
            ),
        ];
        for (text, expected) in cases {
            let text = if text.contains("tokens") || text.is_empty() || !text.contains("queues") {
                text.to_string()
            } else {
                format!("{text}{TOKEN}")
            };
            let err = parse(&text, &[("T", "0123456789abcdef")]).unwrap_err();
            assert!(err.0.contains(expected), "{text:?}: {}", err.0);
        }
        let unknown: std::result::Result<File, _> = toml::from_str("databse = \"x\"");
        assert!(unknown.unwrap_err().to_string().contains("unknown field"));
    }
}
