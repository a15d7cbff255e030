//! Following the primary where it goes: libpq's multi-host URLs
//! (`postgres://user@h1:5432,h2:5432/db?target_session_attrs=read-write`)
//! for a PostgreSQL whose primary can move, in a failover or a planned
//! switchover.
//!
//! sqlx connects to one host, so the store keeps the list and:
//! - finds the server to write to by asking each host in the URL's order,
//!   as libpq does: `SHOW transaction_read_only` must answer `off` for
//!   `read-write`, `SELECT pg_is_in_recovery()` `false` for `primary`; the
//!   pool's new connections go there ([`PgPool::set_connect_options`]);
//! - checks every new connection the same way (the pool's `after_connect`):
//!   one that lands on a standby is refused, the pool tries again, and the
//!   follower is told to look;
//! - keeps a connection of its own, the follower's, on that server, asking
//!   it once a [`CHECK`]: when it is lost or no longer takes writes, the
//!   follower looks through the list until a server does and points the
//!   pool there. Connections opened before that are closed when next
//!   taken from the pool (`before_acquire`, by their age), so none is used
//!   on a demoted primary; those on a dead one fail and are closed by sqlx.
//!
//! A statement running when the primary died has an unknown outcome. Its
//! error reaches the caller as any database error does (a 503 from the
//! service), never as "done" or "failed": a schedule retried with its
//! idempotency key is stored once, and a claim or outcome from before the
//! failover is fenced by the lease epochs read from the new primary.

use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sqlx::Connection;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::error::Error;

/// How often the follower asks the server the pool uses whether it still
/// takes writes.
pub(crate) const CHECK: Duration = Duration::from_millis(500);

/// How long one host may take to connect and answer while the follower
/// looks for the primary, and the follower's check of the server the pool
/// uses, unless the URL's `connect_timeout` says: a server that does not
/// answer within it is left (one that hangs refuses nothing).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a connection's server must be (libpq's `target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Any server that answers (`any`, libpq's default).
    Any,
    /// A server whose sessions take writes by default (`read-write`).
    ReadWrite,
    /// A server not in recovery (`primary`).
    Primary,
}

impl FromStr for Target {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "any" => Ok(Target::Any),
            "read-write" => Ok(Target::ReadWrite),
            "primary" => Ok(Target::Primary),
            "read-only" | "standby" | "prefer-standby" => Err(Error::config(format!(
                "target_session_attrs={s}: a store writes, so it connects to `read-write` or `primary` servers (or `any`)"
            ))),
            _ => Err(Error::config(format!(
                "target_session_attrs={s} is none of any, read-write, primary"
            ))),
        }
    }
}

/// The hosts of a PostgreSQL URL, in its order, with what every other
/// part of the URL says (user, password, database, TLS, options).
#[derive(Debug, Clone)]
pub(crate) struct Hosts {
    hosts: Vec<(String, u16)>,
    base: PgConnectOptions,
    target: Target,
    probe_timeout: Duration,
}

impl Hosts {
    /// Parses a `postgres://` or `postgresql://` URL, with one host or
    /// several separated by commas (`h1:p1,h2,[::1]:p3`; a host without a
    /// port takes the URL's `port` parameter, or 5432), and libpq's
    /// `target_session_attrs` and `connect_timeout` (seconds) parameters.
    pub(crate) fn parse(url: &str) -> Result<Hosts, Error> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(not_postgres());
        };
        if !matches!(scheme, "postgres" | "postgresql") {
            return Err(not_postgres());
        }
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, hostlist) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, query),
            None => (tail, ""),
        };
        let mut target = Target::Any;
        let mut probe_timeout = PROBE_TIMEOUT;
        let mut default_port = None;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "target_session_attrs" => target = value.parse()?,
                "connect_timeout" => {
                    let secs: u64 = value.parse().ok().filter(|&s| s > 0).ok_or_else(|| {
                        Error::config(format!(
                            "connect_timeout={value} is not a whole number of seconds above 0"
                        ))
                    })?;
                    probe_timeout = Duration::from_secs(secs);
                }
                "host" | "hostaddr" | "port" if value.contains(',') || value.contains("%2C") => {
                    return Err(Error::config(
                        "name several hosts in the URL itself (postgres://user@h1:5432,h2:5432/db), not in its parameters",
                    ));
                }
                "port" => {
                    default_port = Some(value.parse::<u16>().map_err(|_| {
                        Error::config(format!("port={value} is not a port number"))
                    })?);
                }
                _ => kept.push(pair),
            }
        }
        let query = kept.join("&");
        let single = |host: &str| {
            let mut url = format!("{scheme}://{userinfo}{host}{path}");
            if !query.is_empty() {
                url.push('?');
                url.push_str(&query);
            }
            PgConnectOptions::from_str(&url)
                .map_err(|err| Error::config(format!("not a valid PostgreSQL URL: {err}")))
        };
        let mut hosts = Vec::new();
        let mut base = None;
        for host in hostlist.split(',') {
            if host.is_empty() && hostlist.contains(',') {
                return Err(Error::config(format!(
                    "an empty host in the PostgreSQL URL's host list `{hostlist}`"
                )));
            }
            let mut options = single(host)?;
            // A host without a port takes the `port` parameter's.
            let own_port = host.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']'));
            if let (Some(port), false) = (default_port, own_port) {
                options = options.port(port);
            }
            hosts.push((options.get_host().to_owned(), options.get_port()));
            base.get_or_insert(options);
        }
        let base = base.expect("split yields at least one host");
        Ok(Hosts {
            hosts,
            base,
            target,
            probe_timeout,
        })
    }

    /// Whether the primary is to be followed: the URL names several hosts
    /// or asks for a server that takes writes.
    pub(crate) fn follows(&self) -> bool {
        self.hosts.len() > 1 || self.target != Target::Any
    }

    /// Every connection from here on sets `search_path` to `schema`.
    pub(crate) fn set_search_path(&mut self, schema: &str) {
        self.base = self.base.clone().options([("search_path", schema)]);
    }

    /// What a connection's server must be.
    pub(crate) fn target(&self) -> Target {
        self.target
    }

    /// The options of the URL's first host: where a store that does not
    /// follow the primary connects.
    pub(crate) fn first(&self) -> PgConnectOptions {
        self.base.clone()
    }

    /// `PostgreSQL at h1:p1` or `PostgreSQL at h1:p1, h2:p2`, for errors.
    pub(crate) fn describe(&self) -> String {
        let mut s = String::from("PostgreSQL at ");
        for (i, (host, port)) in self.hosts.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "{host}:{port}");
        }
        s
    }

    fn options(&self, i: usize) -> PgConnectOptions {
        let (host, port) = &self.hosts[i];
        self.base.clone().host(host).port(*port)
    }

    /// Looks through the hosts in order for one that takes writes (as the
    /// URL's target says): its index, options and the connection that
    /// asked it. Each host has `probe_timeout` to connect and answer, and
    /// every host is asked at once: the first in the URL's order that
    /// takes writes wins, as libpq's rule says, but a host that hangs
    /// (a frozen primary: its kernel accepts the connection, its server
    /// never answers) costs the look one `probe_timeout`, not one for each
    /// host before the one that answers.
    pub(crate) async fn find(&self) -> Result<(usize, PgConnectOptions, PgConnection), Error> {
        self.find_avoiding(None).await
    }

    /// As [`find`](Self::find), with host `avoid` (one that just did not
    /// answer the follower's check) taken last: a later host that takes
    /// writes wins without waiting out its probe.
    async fn find_avoiding(
        &self,
        avoid: Option<usize>,
    ) -> Result<(usize, PgConnectOptions, PgConnection), Error> {
        use futures::stream::{FuturesUnordered, StreamExt};

        let order: Vec<usize> = (0..self.hosts.len())
            .filter(|&i| Some(i) != avoid)
            .chain(avoid)
            .collect();
        let mut asking: FuturesUnordered<_> = order
            .iter()
            .enumerate()
            .map(|(place, &i)| {
                let options = self.options(i);
                async move {
                    let asked = tokio::time::timeout(self.probe_timeout, async {
                        let mut conn = PgConnection::connect_with(&options).await?;
                        let writes = takes_writes(&mut conn, self.target).await?;
                        Ok::<_, sqlx::Error>((conn, writes))
                    })
                    .await;
                    (place, options, asked)
                }
            })
            .collect();
        // Each host's answer, by its place in `order` (the URL's, with
        // `avoid` last): the first that takes writes wins once every host
        // before it has answered otherwise.
        let mut answers: Vec<Option<Result<(PgConnectOptions, PgConnection), String>>> =
            (0..self.hosts.len()).map(|_| None).collect();
        let mut next = 0;
        let mut why = String::new();
        while let Some((place, options, asked)) = asking.next().await {
            answers[place] = Some(match asked {
                Ok(Ok((conn, true))) => Ok((options, conn)),
                Ok(Ok((conn, false))) => {
                    let _ = conn.close().await;
                    Err("a standby (it does not take writes)".to_owned())
                }
                Ok(Err(err)) => Err(err.to_string()),
                Err(_) => Err(format!("no answer in {:?}", self.probe_timeout)),
            });
            while let Some(answer) = answers.get_mut(next).and_then(Option::take) {
                match answer {
                    // The connections the others opened close as they are
                    // dropped, without a goodbye that could hang.
                    Ok((options, conn)) => return Ok((order[next], options, conn)),
                    Err(reason) => {
                        let (host, port) = &self.hosts[order[next]];
                        if !why.is_empty() {
                            why.push_str("; ");
                        }
                        let _ = write!(why, "{host}:{port}: {reason}");
                    }
                }
                next += 1;
            }
        }
        Err(Error::open(
            self.describe(),
            sqlx::Error::Io(std::io::Error::other(format!(
                "no server takes writes ({why})"
            ))),
        ))
    }
}

fn not_postgres() -> Error {
    Error::config(
        "a PostgreSQL URL starts with postgres:// or postgresql:// (postgres://user@host:port/database, or several hosts: postgres://user@h1:5432,h2:5432/database?target_session_attrs=read-write)",
    )
}

/// Whether `conn`'s server is what `target` asks for.
pub(crate) async fn takes_writes(
    conn: &mut PgConnection,
    target: Target,
) -> Result<bool, sqlx::Error> {
    match target {
        Target::Any => Ok(true),
        Target::ReadWrite => {
            let (read_only,): (String,) = sqlx::query_as("SHOW transaction_read_only")
                .fetch_one(&mut *conn)
                .await?;
            Ok(read_only == "off")
        }
        Target::Primary => {
            let (recovering,): (bool,) = sqlx::query_as("SELECT pg_is_in_recovery()")
                .fetch_one(&mut *conn)
                .await?;
            Ok(!recovering)
        }
    }
}

/// When the pool was last pointed at another server: a connection older
/// than that was opened to the old one.
#[derive(Debug)]
pub(crate) struct Moves {
    last: Mutex<Instant>,
    /// Wakes the follower to look now (a new connection found a standby).
    pub(crate) look: Notify,
}

impl Moves {
    pub(crate) fn new() -> Moves {
        Moves {
            last: Mutex::new(Instant::now()),
            look: Notify::new(),
        }
    }

    /// Whether a connection `age` old was opened since the last move.
    pub(crate) fn keeps(&self, age: Duration) -> bool {
        age < self
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    fn moved(&self) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

/// A follower of this process has started: statements on PostgreSQL are
/// run by [`unless_moved`].
static FOLLOWING: AtomicBool = AtomicBool::new(false);

/// Told by a follower of this process when it points its pool at another
/// server.
static MOVED: Notify = Notify::const_new();

/// Runs a statement on PostgreSQL, cut short if a follower of this process
/// points its pool at another server meanwhile: the server it runs on was
/// left because it did not answer (a frozen primary hangs, refusing
/// nothing: its kernel keeps the connection open and takes what is sent)
/// or no longer takes writes. Its outcome is unknown, as for a connection
/// lost mid-commit; the caller's error is a database error, and fences and
/// idempotency keys decide what it did. Without a follower in this
/// process (a store on one host), `statement` runs as it is.
///
/// The signal is the process's, not the pool's: a move of one store's
/// pool also cuts the statements of another store of the process on
/// PostgreSQL, which are then tried again as after any database error.
pub(crate) async fn unless_moved<T>(
    statement: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    if !FOLLOWING.load(Ordering::Relaxed) {
        return statement.await;
    }
    let moved = MOVED.notified();
    tokio::select! {
        biased;
        done = statement => done,
        () = moved => Err(Error::from(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the PostgreSQL primary moved while the statement ran: its outcome is unknown",
        )))),
    }
}

/// The follower's task, stopped when the store that started it is dropped.
#[derive(Debug)]
pub(crate) struct Follower(AbortHandle);

impl Drop for Follower {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the follower of `pool`, whose connections go to host `current`
/// of `hosts`, and `conn` is open on it.
pub(crate) fn follow(
    pool: PgPool,
    hosts: Arc<Hosts>,
    current: usize,
    conn: PgConnection,
    moves: Arc<Moves>,
) -> Follower {
    FOLLOWING.store(true, Ordering::Relaxed);
    let task = tokio::spawn(async move {
        let mut current = current;
        let mut conn = Some(conn);
        // Whether the last look found no server to write to (said once).
        let mut lost = false;
        // The server the pool used, if it did not answer its check in time:
        // taken last by the looks that follow, until one finds a server.
        let mut silent = None;
        loop {
            tokio::select! {
                () = moves.look.notified() => {}
                () = tokio::time::sleep(CHECK) => {}
            }
            if pool.is_closed() {
                return;
            }
            if let Some(c) = conn.as_mut() {
                let asked =
                    tokio::time::timeout(hosts.probe_timeout, takes_writes(c, hosts.target));
                match asked.await {
                    Ok(Ok(true)) => continue,
                    Err(_) => silent = Some(current),
                    Ok(_) => {}
                }
            }
            if let Some(c) = conn.take() {
                // In doubt: closed without a goodbye that could hang.
                drop(c);
            }
            match hosts.find_avoiding(silent).await {
                Ok((i, options, c)) => {
                    conn = Some(c);
                    silent = None;
                    if std::mem::take(&mut lost) && i == current {
                        tracing::info!("the PostgreSQL primary answers again");
                    }
                    if i != current {
                        let (host, port) = &hosts.hosts[i];
                        tracing::warn!(%host, port, "the PostgreSQL primary moved; new connections go there");
                        pool.set_connect_options(options);
                        moves.moved();
                        // Statements hung on the server left go now.
                        MOVED.notify_waiters();
                        current = i;
                    }
                }
                Err(err) if !lost => {
                    lost = true;
                    tracing::warn!(%err, "no PostgreSQL server takes writes; looking every {CHECK:?}");
                }
                Err(_) => {}
            }
        }
    });
    Follower(task.abort_handle())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_hosts_keeps_its_order_ports_and_the_rest_of_the_url() {
        let hosts = Hosts::parse(
            "postgres://ttw:secret@db1:6001,db2,[::1]:6003/tasks?target_session_attrs=read-write&port=6002&application_name=x",
        )
        .unwrap();
        assert_eq!(
            hosts.hosts,
            [
                ("db1".to_owned(), 6001),
                ("db2".to_owned(), 6002),
                ("[::1]".to_owned(), 6003)
            ]
        );
        assert_eq!(hosts.target, Target::ReadWrite);
        assert!(hosts.follows());
        let second = hosts.options(1);
        assert_eq!(second.get_username(), "ttw");
        assert_eq!(second.get_database(), Some("tasks"));
        assert_eq!(second.get_host(), "db2");
        assert_eq!(
            hosts.describe(),
            "PostgreSQL at db1:6001, db2:6002, [::1]:6003"
        );
    }

    #[test]
    fn one_host_without_a_target_is_not_followed() {
        let hosts = Hosts::parse("postgresql://u@localhost:5433/d").unwrap();
        assert!(!hosts.follows());
        assert_eq!(hosts.first().get_port(), 5433);
        let primary = Hosts::parse("postgres://u@h/d?target_session_attrs=primary").unwrap();
        assert!(
            primary.follows(),
            "one host, but only while it is a primary"
        );
        assert_eq!(primary.first().get_port(), 5432);
    }

    #[test]
    fn what_a_store_cannot_follow_is_refused_with_its_reason() {
        for (url, says) in [
            ("mysql://h/d", "starts with postgres://"),
            ("postgres://u@h1,,h2/d", "an empty host"),
            (
                "postgres://u@h/d?target_session_attrs=standby",
                "a store writes",
            ),
            ("postgres://u@h/d?target_session_attrs=bogus", "none of any"),
            ("postgres://u@/d?host=h1,h2", "in the URL itself"),
            ("postgres://u@h/d?connect_timeout=0", "connect_timeout=0"),
            ("postgres://u@h1:port,h2/d", "not a valid PostgreSQL URL"),
        ] {
            let err = Hosts::parse(url).unwrap_err();
            assert!(err.is_config(), "{url}: {err}");
            assert!(err.to_string().contains(says), "{url}: {err}");
        }
    }

    /// Without a live host, the error names each host and why.
    #[tokio::test]
    async fn no_host_taking_writes_is_an_error_naming_each() {
        let dead =
            Hosts::parse("postgres://u@127.0.0.1:1,127.0.0.1:2/d?target_session_attrs=primary")
                .unwrap();
        let err = match dead.find().await {
            Err(err) => err.to_string(),
            Ok(_) => panic!("nothing listens there"),
        };
        assert!(
            err.contains("127.0.0.1:1:")
                && err.contains("127.0.0.1:2:")
                && err.contains("no server takes writes"),
            "{err}"
        );
    }

    #[test]
    fn a_connection_is_kept_only_if_opened_since_the_last_move() {
        let moves = Moves::new();
        std::thread::sleep(Duration::from_millis(20));
        assert!(moves.keeps(Duration::from_millis(1)));
        assert!(!moves.keeps(Duration::from_secs(60)));
        moves.moved();
        assert!(
            !moves.keeps(Duration::from_millis(10)),
            "older than the move"
        );
    }
}
