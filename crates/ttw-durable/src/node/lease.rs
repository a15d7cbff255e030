//! Membership and shard leases: each node heartbeats in `ttw_nodes`, takes
//! free shards up to its fair share (`ceil(shards / live nodes)`), and gives
//! back surplus when nodes join (draining busy shards first, so steady load
//! cannot hold them forever).
//!
//! A lease row names its owner twice: the node id (stable across restarts,
//! if the user gives one) and the session (new every time a scheduler
//! starts). A lease is held while its owner's session heartbeats: the lease
//! rows are not renewed one by one, so a heartbeat is one small write
//! whatever the shard count. A shard is free when it has no owner, when
//! its owner's membership row is gone or older than the TTL, or when its
//! owner is an earlier session of the same node id. A node whose process is
//! proven gone (see [`crate::node::process`]) has its row deleted by whichever
//! node on the same machine sees it first, which frees its shards at once.
//!
//! Heartbeats are stamped and compared by the database's clock. Every claim
//! and completion checks the session, and completions also check the epoch
//! the claim stamped, so a node that lost a lease (a pause, a partition, or
//! a restart that took its shards back) fails in the database; the age of
//! a heartbeat only decides when a lease may be taken over.

use std::sync::Arc;

use sqlx::Row;

use crate::error::Error;
use crate::model::lanes::Lanes;
use crate::node::process;
use crate::sql::db::{fnv1a, placeholders, with_pool, write_with_pool, Db, Urgency};
use crate::sql::schema;

/// What one heartbeat learned: the lanes (see [`Lanes`]) this session holds
/// after it, and how many it took over from another owner.
#[derive(Debug, Default)]
pub(crate) struct Beat {
    pub(crate) owned: Vec<u32>,
    pub(crate) acquired: Vec<u32>,
    pub(crate) takeovers: u64,
    /// Surplus shards still busy: marked to take no new claims, to be given
    /// back by a later heartbeat once idle.
    pub(crate) draining: Vec<u32>,
    /// Sessions on this machine whose process was found gone, and whose
    /// membership this heartbeat ended.
    pub(crate) gone: Vec<String>,
}

/// Another session's membership row, heartbeating within the TTL.
struct Member {
    node: String,
    session: String,
    process: Option<String>,
    leaving: bool,
    /// The queues it serves, comma-separated.
    queues: String,
}

/// What the ordinary part of a heartbeat found.
struct Around {
    /// This session's membership row was there, and is stamped now.
    alive: bool,
    /// The other sessions heartbeating within the TTL.
    members: Vec<Member>,
    /// The lanes whose lease this session holds.
    owned: Vec<u32>,
}

/// The lease statements of one node session.
pub(crate) struct Leases {
    db: Db,
    lanes: Arc<Lanes>,
    shards: u32,
    node: String,
    session: String,
    ttl_ms: i64,
}

impl Leases {
    /// Leases of node `node` in session `session` on the lanes of `lanes`
    /// (a store of `shards` shards), lasting `ttl_ms` without a heartbeat.
    pub(crate) fn new(
        db: Db,
        lanes: Arc<Lanes>,
        shards: u32,
        node: String,
        session: String,
        ttl_ms: i64,
    ) -> Leases {
        Leases {
            db,
            lanes,
            shards,
            node,
            session,
            ttl_ms,
        }
    }

    /// Makes sure every queue this node serves has its lease rows: the
    /// first node to serve a queue adds them.
    pub(crate) async fn add_lease_rows(&self) -> Result<(), Error> {
        for queue in self.lanes.queues() {
            schema::add_lease_rows(&self.db, queue, self.shards).await?;
        }
        Ok(())
    }

    /// A shard with no live owner: none, an owner whose membership row is
    /// gone or older than the TTL by the database's clock, or an earlier
    /// session of this node id. `$1` is the node id, `$2` the session, `$3`
    /// the TTL in milliseconds.
    fn free(&self) -> String {
        format!(
            "(owner_session IS NULL OR (owner_node = $1 AND owner_session <> $2) \
             OR NOT EXISTS (SELECT 1 FROM ttw_nodes n WHERE n.node_id = ttw_leases.owner_node \
             AND n.session = ttw_leases.owner_session AND n.heartbeat_at > {} - $3))",
            self.db.clock_sql()
        )
    }

    /// One heartbeat: record liveness (the one write of an ordinary
    /// heartbeat, which keeps every lease the session holds), end the
    /// membership of sessions on this machine whose process is gone, read
    /// the shards held, then take or give back shards toward the fair
    /// share.
    ///
    /// Before a surplus shard is given back, `give_back` must agree: it
    /// marks the shard so no new claim starts in it, and refuses while a
    /// delivery is in flight there (see [`ShardTable::begin_release`]).
    /// Idle shards go first; if too few are idle, busy ones are handed to
    /// `drain` (no new claims there) and listed in [`Beat::draining`], so
    /// they are idle for a later heartbeat. The caller clears the other
    /// marks once it has recorded the result.
    ///
    /// A node `leaving` (shutting down) is marked so in the membership
    /// table already: it keeps its row fresh (its leases stay its own until
    /// given back), is not counted in the shares, takes nothing, and treats
    /// every shard it holds as surplus, so idle ones go back at once and
    /// busy ones as they drain.
    ///
    /// [`ShardTable::begin_release`]: crate::node::shards::ShardTable::begin_release
    pub(crate) async fn heartbeat(
        &self,
        leaving: bool,
        give_back: impl Fn(u32) -> bool,
        drain: impl Fn(u32),
    ) -> Result<Beat, Error> {
        let mut beat = Beat::default();
        let Around {
            alive,
            members,
            mut owned,
        } = self.look_around().await?;
        if !alive && !leaving {
            self.join().await?;
        }
        // This node counts itself unless leaving; a leaving node's row
        // keeps its leases live but it takes no share. Each queue's shards
        // are shared among the nodes that serve it.
        let queues = self.lanes.queues().len();
        let mut live = vec![u32::from(!leaving); queues];
        for member in members {
            if member.process.as_deref().is_some_and(process::is_gone) {
                self.end_membership(&member.node, &member.session).await?;
                beat.gone.push(member.session);
            } else if !member.leaving {
                for queue in member.queues.split(',') {
                    if let Some(index) = self.lanes.queue_index(queue) {
                        live[index] += 1;
                    }
                }
            }
        }
        let mut all = Vec::with_capacity(owned.len());
        for (index, live) in live.into_iter().enumerate() {
            let target = if leaving {
                0
            } else {
                self.shards.div_ceil(live.max(1)) as usize
            };
            let lanes = self.lanes.lanes_of(index);
            let mut mine: Vec<u32> = owned
                .iter()
                .copied()
                .filter(|l| lanes.contains(l))
                .collect();
            if mine.len() < target {
                let (acquired, takeovers) = self.take_free(index, target - mine.len()).await?;
                mine.extend_from_slice(&acquired);
                beat.acquired.extend(acquired);
                beat.takeovers += takeovers;
            } else if mine.len() > target {
                let (given, draining) = pick_surplus(&mut mine, target, &give_back, &drain);
                if !given.is_empty() {
                    self.release(Some(&given)).await?;
                    mine.retain(|s| !given.contains(s));
                }
                beat.draining.extend(draining);
            }
            all.extend(mine);
        }
        owned = all;
        owned.sort_unstable();
        beat.owned = owned;
        Ok(beat)
    }

    /// Stamps this session's membership row with the database's clock.
    /// Returns whether there was a row to stamp. On SQLite only: on
    /// PostgreSQL the stamp is part of the heartbeat's one statement.
    #[cfg(feature = "sqlite")]
    async fn mark_alive(&self) -> Result<bool, Error> {
        let n = write_with_pool!(&self.db, Urgency::Urgent, pool => {
            sqlx::query(&self.mark_alive_sql())
                .bind(&self.node)
                .bind(&self.session)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n == 1)
    }

    /// The statement that stamps this session's membership row: `$1` is
    /// the node id, `$2` the session.
    fn mark_alive_sql(&self) -> String {
        format!(
            "UPDATE ttw_nodes SET heartbeat_at = {} WHERE node_id = $1 AND session = $2",
            self.db.clock_sql()
        )
    }

    /// Writes this session's membership row: the first heartbeat, or the
    /// row was lost (deleted by hand, or taken by another session of this
    /// node id, which this takes back: two live processes sharing a node
    /// id take it from each other in turn; ids must be unique).
    async fn join(&self) -> Result<(), Error> {
        let sql = format!(
            "INSERT INTO ttw_nodes (node_id, session, heartbeat_at, process, leaving, queues, lease_ttl_ms) \
             VALUES ($1, $2, {}, $3, 0, $4, $5) \
             ON CONFLICT (node_id) DO UPDATE SET session = excluded.session, heartbeat_at = excluded.heartbeat_at, \
             process = excluded.process, leaving = 0, queues = excluded.queues, lease_ttl_ms = excluded.lease_ttl_ms",
            self.db.clock_sql()
        );
        write_with_pool!(&self.db, Urgency::Urgent, pool => {
            sqlx::query(&sql)
                .bind(&self.node)
                .bind(&self.session)
                .bind(process::identity())
                .bind(self.lanes.joined())
                .bind(self.ttl_ms)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// The ordinary part of a heartbeat: stamps this session's membership
    /// row, and reads the other sessions that heartbeated within the TTL
    /// and the shards whose lease this session holds. On PostgreSQL that is
    /// one statement (the stamp is a data-modifying `WITH`; an idle node's
    /// statements are mostly heartbeats), on SQLite two.
    async fn look_around(&self) -> Result<Around, Error> {
        let read = format!(
            "SELECT node_id, session, process, leaving, queues, NULL AS queue, NULL AS shard FROM ttw_nodes \
             WHERE heartbeat_at > {} - $3 \
             UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, queue, shard FROM ttw_leases WHERE owner_session = $2",
            self.db.clock_sql()
        );
        type Found = (
            Option<String>,
            Option<String>,
            Option<String>,
            Option<i64>,
            Option<String>,
            Option<String>,
            Option<i64>,
        );
        let (stamped, rows): (bool, Vec<Found>) = match &self.db {
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => {
                // The read sees the table as it was before the stamp (one
                // snapshot), so the stamp reports itself as a row of its
                // own: no node id, this session.
                let sql = format!(
                    "WITH stamped AS ({} RETURNING session) {read} \
                     UNION ALL SELECT NULL, session, NULL, NULL, NULL, NULL, NULL FROM stamped",
                    self.mark_alive_sql()
                );
                let mut rows: Vec<Found> = sqlx::query_as(&sql)
                    .bind(&self.node)
                    .bind(&self.session)
                    .bind(self.ttl_ms)
                    .fetch_all(pool)
                    .await?;
                let before = rows.len();
                rows.retain(|row| {
                    !(row.0.is_none()
                        && row.6.is_none()
                        && row.1.as_deref() == Some(self.session.as_str()))
                });
                (rows.len() < before, rows)
            }
            #[cfg(feature = "sqlite")]
            Db::Sqlite(pool, _) => {
                let stamped = self.mark_alive().await?;
                let rows = sqlx::query_as(&read)
                    .bind(&self.node)
                    .bind(&self.session)
                    .bind(self.ttl_ms)
                    .fetch_all(pool)
                    .await?;
                (stamped, rows)
            }
        };
        let mut members = Vec::new();
        let mut owned = Vec::new();
        for (node, session, process, leaving, queues, queue, shard) in rows {
            match (node, session, shard) {
                (_, _, Some(shard)) => {
                    // A lease of a queue this session does not serve
                    // cannot be: sessions are never reused.
                    if let Some(index) = queue.and_then(|q| self.lanes.queue_index(&q)) {
                        owned.push(self.lanes.lane_of(index, shard as u32));
                    }
                }
                // This session's own membership row.
                (Some(_), Some(session), None) if session == self.session => {}
                (Some(node), Some(session), None) => members.push(Member {
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
        Ok(Around {
            alive: stamped,
            members,
            owned,
        })
    }

    /// Takes up to `want` free shards of the queue at `index`. Returns the
    /// lanes taken, and how many of them had an owner before (takeovers).
    async fn take_free(&self, index: usize, want: usize) -> Result<(Vec<u32>, u64), Error> {
        let free = self.free();
        let queue: &str = &self.lanes.queues()[index];
        let shards = i64::from(self.shards);
        // Start each node's search at a different shard so nodes joining
        // together do not all race for the same rows.
        let offset = (fnv1a(self.session.as_bytes()) % u64::from(self.shards)) as i64;
        let candidates: Vec<(i64, Option<String>)> = with_pool!(&self.db, pool => {
            sqlx::query_as(&format!(
                "SELECT shard, owner_session FROM ttw_leases WHERE queue = $4 AND {free} \
                 ORDER BY (shard + $5) % $6 LIMIT $7"
            ))
            .bind(&self.node)
            .bind(&self.session)
            .bind(self.ttl_ms)
            .bind(queue)
            .bind(offset)
            .bind(shards)
            .bind(want as i64)
            .fetch_all(pool)
            .await?
        });
        if candidates.is_empty() {
            return Ok((Vec::new(), 0));
        }
        // The free condition again, so that of two nodes racing for a
        // shard only one gets it.
        let sql = format!(
            "UPDATE ttw_leases SET owner_node = $1, owner_session = $2, epoch = epoch + 1 \
             WHERE queue = $4 AND {free} AND shard IN ({}) RETURNING shard",
            placeholders(5, candidates.len())
        );
        let got: Vec<i64> = write_with_pool!(&self.db, Urgency::Urgent, pool => {
            let mut query = sqlx::query(&sql)
                .bind(&self.node)
                .bind(&self.session)
                .bind(self.ttl_ms)
                .bind(queue);
            for (shard, _) in &candidates {
                query = query.bind(shard);
            }
            query
                .fetch_all(pool)
                .await?
                .iter()
                .map(|row| row.try_get::<i64, _>("shard"))
                .collect::<Result<_, _>>()?
        });
        let takeovers = got
            .iter()
            .filter(|&&shard| candidates.iter().any(|c| c.0 == shard && c.1.is_some()))
            .count() as u64;
        let lanes = got
            .into_iter()
            .map(|shard| self.lanes.lane_of(index, shard as u32))
            .collect();
        Ok((lanes, takeovers))
    }

    /// Gives back this session's leases (all of them, or `only` these
    /// lanes) so others can take them at once.
    pub(crate) async fn release(&self, only: Option<&[u32]>) -> Result<(), Error> {
        let Some(only) = only else {
            write_with_pool!(&self.db, Urgency::Urgent, pool => {
                sqlx::query(
                    "UPDATE ttw_leases SET owner_node = NULL, owner_session = NULL WHERE owner_session = $1",
                )
                .bind(&self.session)
                .execute(pool)
                .await?;
            });
            return Ok(());
        };
        for (index, queue) in self.lanes.queues().iter().enumerate() {
            let lanes = self.lanes.lanes_of(index);
            let shards: Vec<i64> = only
                .iter()
                .filter(|l| lanes.contains(l))
                .map(|&l| i64::from(self.lanes.shard_of(l)))
                .collect();
            if shards.is_empty() {
                continue;
            }
            let sql = format!(
                "UPDATE ttw_leases SET owner_node = NULL, owner_session = NULL \
                 WHERE owner_session = $1 AND queue = $2 AND shard IN ({})",
                placeholders(3, shards.len())
            );
            write_with_pool!(&self.db, Urgency::Urgent, pool => {
                let mut query = sqlx::query(&sql).bind(&self.session).bind(&**queue);
                for shard in &shards {
                    query = query.bind(shard);
                }
                query.execute(pool).await?;
            });
        }
        Ok(())
    }

    /// Marks the node as leaving (a graceful shutdown has begun): the others
    /// stop counting it when they work out their shares, while its row, and
    /// so the leases it has not given back yet, stay live as it heartbeats.
    pub(crate) async fn leave(&self) -> Result<(), Error> {
        self.on_member(
            "UPDATE ttw_nodes SET leaving = 1",
            &self.node,
            &self.session,
        )
        .await
    }

    /// Removes this session's membership row: the end of a graceful
    /// shutdown.
    pub(crate) async fn forget(&self) -> Result<(), Error> {
        self.end_membership(&self.node, &self.session).await
    }

    /// Removes a session's membership row: this one's at the end of a
    /// graceful shutdown, or another whose process was found gone.
    async fn end_membership(&self, node: &str, session: &str) -> Result<(), Error> {
        self.on_member("DELETE FROM ttw_nodes", node, session).await
    }

    /// Runs `statement` on the membership row of `node` in session
    /// `session`.
    async fn on_member(&self, statement: &str, node: &str, session: &str) -> Result<(), Error> {
        let sql = format!("{statement} WHERE node_id = $1 AND session = $2");
        write_with_pool!(&self.db, Urgency::Urgent, pool => {
            sqlx::query(&sql).bind(node).bind(session).execute(pool).await?;
        });
        Ok(())
    }
}

/// Picks the surplus shards of `owned` above `target` to give back:
/// highest first, in a stable order (so the shards drained by one
/// heartbeat are the ones the next one gives back), idle ones as
/// `give_back` agrees, and if too few are idle, busy ones handed to
/// `drain`: under steady load a shard may never be idle when a heartbeat
/// looks. Returns `(given, draining)`.
fn pick_surplus(
    owned: &mut [u32],
    target: usize,
    give_back: &impl Fn(u32) -> bool,
    drain: &impl Fn(u32),
) -> (Vec<u32>, Vec<u32>) {
    let surplus = owned.len() - target;
    owned.sort_unstable();
    let mut given: Vec<u32> = Vec::with_capacity(surplus);
    for &shard in owned.iter().rev() {
        if given.len() == surplus {
            break;
        }
        if give_back(shard) {
            given.push(shard);
        }
    }
    let mut draining = Vec::new();
    for &shard in owned.iter().rev() {
        if given.len() + draining.len() >= surplus {
            break;
        }
        if !given.contains(&shard) {
            drain(shard);
            draining.push(shard);
        }
    }
    (given, draining)
}
