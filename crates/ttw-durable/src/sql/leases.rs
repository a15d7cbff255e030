//! Statements on `ttw_nodes` and `ttw_leases`: a session's membership
//! (join, heartbeat, leave, end), and the shard leases it takes and gives
//! back. The policy (fair shares, which surplus goes first) is the node's
//! (`node/lease.rs`); the conditions that make a lease free or held are
//! here, stamped and compared by the database's clock.

use crate::error::Error;
use crate::sql::db::{placeholders, with_pool, write_with_pool, Db, Urgency};

/// One node session, as its statements name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Session<'a> {
    /// The node id (stable across restarts if the user gives one).
    pub(crate) node: &'a str,
    /// This start of the node.
    pub(crate) session: &'a str,
    /// How long its leases last without a heartbeat, in milliseconds.
    pub(crate) ttl_ms: i64,
}

/// A shard with no live owner: none, an owner whose membership row is gone
/// or older than the TTL by the database's clock, or an earlier session of
/// this node id. `$1` is the node id, `$2` the session, `$3` the TTL in
/// milliseconds.
fn free(db: &Db) -> String {
    format!(
        "(owner_session IS NULL OR (owner_node = $1 AND owner_session <> $2) \
         OR NOT EXISTS (SELECT 1 FROM ttw_nodes n WHERE n.node_id = ttw_leases.owner_node \
         AND n.session = ttw_leases.owner_session AND n.heartbeat_at > {} - $3))",
        db.clock_sql()
    )
}

/// The statement that stamps a session's membership row: `$1` is the node
/// id, `$2` the session.
fn mark_alive_sql(db: &Db) -> String {
    format!(
        "UPDATE ttw_nodes SET heartbeat_at = {} WHERE node_id = $1 AND session = $2",
        db.clock_sql()
    )
}

/// Another session's membership row, heartbeating within the TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberRow {
    pub(crate) node: String,
    pub(crate) session: String,
    /// Where its process runs (see `node::process`).
    pub(crate) process: Option<String>,
    pub(crate) leaving: bool,
    /// The queues it serves, comma-separated.
    pub(crate) queues: String,
}

/// A lease a session holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseRow {
    pub(crate) queue: String,
    pub(crate) shard: i64,
}

/// What [`look_around`] read.
#[derive(Debug, Default)]
pub(crate) struct Around {
    /// The session's membership row was there, and is stamped now.
    pub(crate) stamped: bool,
    /// The other sessions heartbeating within the TTL.
    pub(crate) members: Vec<MemberRow>,
    /// The leases the session holds.
    pub(crate) leases: Vec<LeaseRow>,
}

/// The ordinary part of a heartbeat: stamps the session's membership row,
/// and reads the other sessions that heartbeated within the TTL and the
/// leases the session holds. On PostgreSQL that is one statement (the
/// stamp is a data-modifying `WITH`; an idle node's statements are mostly
/// heartbeats), on SQLite two.
pub(crate) async fn look_around(db: &Db, s: Session<'_>) -> Result<Around, Error> {
    let read = format!(
        "SELECT node_id, session, process, leaving, queues, NULL AS queue, NULL AS shard FROM ttw_nodes \
         WHERE heartbeat_at > {} - $3 \
         UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, queue, shard FROM ttw_leases WHERE owner_session = $2",
        db.clock_sql()
    );
    let mut around = Around::default();
    let rows = match db {
        #[cfg(feature = "postgres")]
        Db::Postgres(pool) => {
            crate::sql::primary::unless_moved(async {
                Ok::<_, Error>({
                    // The read sees the table as it was before the stamp (one
                    // snapshot), so the stamp reports itself as a row of its own:
                    // no node id, this session, no shard.
                    let sql = format!(
                        "WITH stamped AS ({} RETURNING session) {read} \
                 UNION ALL SELECT NULL, session, NULL, NULL, NULL, NULL, NULL FROM stamped",
                        mark_alive_sql(db)
                    );
                    sqlx::query_as::<_, Found>(&sql)
                        .bind(s.node)
                        .bind(s.session)
                        .bind(s.ttl_ms)
                        .fetch_all(pool)
                        .await?
                })
            })
            .await?
        }
        #[cfg(feature = "sqlite")]
        Db::Sqlite(pool, _) => {
            around.stamped = mark_alive(db, s).await?;
            sqlx::query_as::<_, Found>(&read)
                .bind(s.node)
                .bind(s.session)
                .bind(s.ttl_ms)
                .fetch_all(pool)
                .await?
        }
    };
    for row in rows {
        match row {
            Found {
                shard: Some(shard),
                queue: Some(queue),
                ..
            } => around.leases.push(LeaseRow { queue, shard }),
            // The stamp, on PostgreSQL.
            Found {
                node: None,
                session: Some(session),
                shard: None,
                ..
            } if session == s.session => around.stamped = true,
            // This session's own membership row.
            Found {
                node: Some(_),
                session: Some(session),
                shard: None,
                ..
            } if session == s.session => {}
            Found {
                node: Some(node),
                session: Some(session),
                shard: None,
                process,
                leaving,
                queues,
                ..
            } => around.members.push(MemberRow {
                node,
                session,
                process,
                leaving: leaving.unwrap_or(0) != 0,
                queues: queues.unwrap_or_default(),
            }),
            _ => {
                return Err(Error::from(sqlx::Error::Decode(
                    "a membership row without node or session in ttw_nodes".into(),
                )))
            }
        }
    }
    Ok(around)
}

/// A row of [`look_around`]'s read: a membership or a lease.
#[derive(sqlx::FromRow)]
struct Found {
    #[sqlx(rename = "node_id")]
    node: Option<String>,
    session: Option<String>,
    process: Option<String>,
    leaving: Option<i64>,
    queues: Option<String>,
    queue: Option<String>,
    shard: Option<i64>,
}

/// Stamps the session's membership row with the database's clock. Returns
/// whether there was a row to stamp.
#[cfg(feature = "sqlite")]
async fn mark_alive(db: &Db, s: Session<'_>) -> Result<bool, Error> {
    let sql = mark_alive_sql(db);
    let n = write_with_pool!(db, Urgency::Urgent, pool => {
        sqlx::query(&sql)
            .bind(s.node)
            .bind(s.session)
            .execute(pool)
            .await?
            .rows_affected()
    });
    Ok(n == 1)
}

/// What a session joins with: where it runs (`process`), and the queues it
/// serves (comma-separated).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Joining<'a> {
    pub(crate) process: Option<&'a str>,
    pub(crate) queues: &'a str,
}

/// Some shards of one queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shards<'a> {
    pub(crate) queue: &'a str,
    pub(crate) shards: &'a [i64],
}

/// Writes the session's membership row, taking the node id's row from an
/// earlier session if there is one.
pub(crate) async fn join(db: &Db, s: Session<'_>, joining: Joining<'_>) -> Result<(), Error> {
    let Joining { process, queues } = joining;
    let sql = format!(
        "INSERT INTO ttw_nodes (node_id, session, heartbeat_at, process, leaving, queues, lease_ttl_ms) \
         VALUES ($1, $2, {}, $3, 0, $4, $5) \
         ON CONFLICT (node_id) DO UPDATE SET session = excluded.session, heartbeat_at = excluded.heartbeat_at, \
         process = excluded.process, leaving = 0, queues = excluded.queues, lease_ttl_ms = excluded.lease_ttl_ms, \
         takeovers = 0",
        db.clock_sql()
    );
    write_with_pool!(db, Urgency::Urgent, pool => {
        sqlx::query(&sql)
            .bind(s.node)
            .bind(s.session)
            .bind(process)
            .bind(queues)
            .bind(s.ttl_ms)
            .execute(pool)
            .await?;
    });
    Ok(())
}

/// A shard free to take, and its owner before, if it had one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FreeShard {
    pub(crate) shard: i64,
    pub(crate) owner_session: Option<String>,
}

/// The parameters of [`free_shards`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Search<'a> {
    pub(crate) queue: &'a str,
    /// The queue's shard count.
    pub(crate) shards: i64,
    /// Where the search starts, so that nodes joining together do not all
    /// race for the same rows.
    pub(crate) offset: i64,
    pub(crate) want: i64,
}

/// Up to [`Search::want`] free shards of a queue, in the order of the
/// search.
pub(crate) async fn free_shards(
    db: &Db,
    s: Session<'_>,
    search: Search<'_>,
) -> Result<Vec<FreeShard>, Error> {
    let sql = format!(
        "SELECT shard, owner_session FROM ttw_leases WHERE queue = $4 AND {} \
         ORDER BY (shard + $5) % $6 LIMIT $7",
        free(db)
    );
    let rows: Vec<(i64, Option<String>)> = with_pool!(db, pool => {
        sqlx::query_as(&sql)
            .bind(s.node)
            .bind(s.session)
            .bind(s.ttl_ms)
            .bind(search.queue)
            .bind(search.offset)
            .bind(search.shards)
            .bind(search.want)
            .fetch_all(pool)
            .await?
    });
    Ok(rows
        .into_iter()
        .map(|(shard, owner_session)| FreeShard {
            shard,
            owner_session,
        })
        .collect())
}

/// Takes the leases of the shards that are still free (of two sessions
/// racing for a shard, only one gets it), bumping each one's epoch.
/// Returns the shards taken.
pub(crate) async fn take(db: &Db, s: Session<'_>, wanted: Shards<'_>) -> Result<Vec<i64>, Error> {
    let Shards { queue, shards } = wanted;
    if shards.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "UPDATE ttw_leases SET owner_node = $1, owner_session = $2, epoch = epoch + 1 \
         WHERE queue = $4 AND {} AND shard IN ({}) RETURNING shard",
        free(db),
        placeholders(5, shards.len())
    );
    let got = write_with_pool!(db, Urgency::Urgent, pool => {
        let mut query = sqlx::query_scalar::<_, i64>(&sql)
            .bind(s.node)
            .bind(s.session)
            .bind(s.ttl_ms)
            .bind(queue);
        for shard in shards {
            query = query.bind(shard);
        }
        query.fetch_all(pool).await?
    });
    Ok(got)
}

/// Gives back every lease `session` holds.
pub(crate) async fn release_all(db: &Db, session: &str) -> Result<(), Error> {
    write_with_pool!(db, Urgency::Urgent, pool => {
        sqlx::query(
            "UPDATE ttw_leases SET owner_node = NULL, owner_session = NULL WHERE owner_session = $1",
        )
        .bind(session)
        .execute(pool)
        .await?;
    });
    Ok(())
}

/// Gives back the leases of the shards that `session` holds.
pub(crate) async fn release(db: &Db, session: &str, given: Shards<'_>) -> Result<(), Error> {
    let Shards { queue, shards } = given;
    if shards.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "UPDATE ttw_leases SET owner_node = NULL, owner_session = NULL \
         WHERE owner_session = $1 AND queue = $2 AND shard IN ({})",
        placeholders(3, shards.len())
    );
    write_with_pool!(db, Urgency::Urgent, pool => {
        let mut query = sqlx::query(&sql).bind(session).bind(queue);
        for shard in shards {
            query = query.bind(shard);
        }
        query.execute(pool).await?;
    });
    Ok(())
}

/// Adds `n` to the takeovers a session's row shows.
pub(crate) async fn count_takeovers(db: &Db, s: Session<'_>, n: u64) -> Result<(), Error> {
    write_with_pool!(db, Urgency::Urgent, pool => {
        sqlx::query("UPDATE ttw_nodes SET takeovers = takeovers + $1 WHERE node_id = $2 AND session = $3")
            .bind(i64::try_from(n).unwrap_or(i64::MAX))
            .bind(s.node)
            .bind(s.session)
            .execute(pool)
            .await?;
    });
    Ok(())
}

/// Marks a session as leaving: the others stop counting it in their
/// shares, while its row, and the leases it has not given back, stay live
/// as it heartbeats.
pub(crate) async fn mark_leaving(db: &Db, node: &str, session: &str) -> Result<(), Error> {
    write_with_pool!(db, Urgency::Urgent, pool => {
        sqlx::query("UPDATE ttw_nodes SET leaving = 1 WHERE node_id = $1 AND session = $2")
            .bind(node)
            .bind(session)
            .execute(pool)
            .await?;
    });
    Ok(())
}

/// Removes a session's membership row.
pub(crate) async fn end_membership(db: &Db, node: &str, session: &str) -> Result<(), Error> {
    write_with_pool!(db, Urgency::Urgent, pool => {
        sqlx::query("DELETE FROM ttw_nodes WHERE node_id = $1 AND session = $2")
            .bind(node)
            .bind(session)
            .execute(pool)
            .await?;
    });
    Ok(())
}
