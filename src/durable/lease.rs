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
//! proven gone (see [`super::process`]) has its row deleted by whichever
//! node on the same machine sees it first, which frees its shards at once.
//!
//! Heartbeats are stamped and compared by the database's clock. Every claim
//! and completion checks the session, and completions also check the epoch
//! the claim stamped, so a node that lost a lease (a pause, a partition, or
//! a restart that took its shards back) fails in the database; the age of
//! a heartbeat only decides when a lease may be taken over.

use sqlx::Row;

use super::process;
use super::store::{with_pool, Store};
use super::Error;

/// What one heartbeat learned: the shards this session holds after it, and
/// how many it took over from another owner.
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

/// A shard with no live owner: none, an owner whose membership row is gone
/// or older than the TTL by the database's clock, or an earlier session of
/// this node id. `$1` is the node id, `$2` the session, `$3` the TTL in
/// milliseconds.
fn free(clock: &str) -> String {
    format!(
        "(owner_session IS NULL OR (owner_node = $1 AND owner_session <> $2) \
         OR NOT EXISTS (SELECT 1 FROM ttw_nodes n WHERE n.node_id = ttw_leases.owner_node \
         AND n.session = ttw_leases.owner_session AND n.heartbeat_at > {clock} - $3))"
    )
}

/// One heartbeat of node `node` (session `session`): record liveness (the
/// one write of an ordinary heartbeat, which keeps every lease the session
/// holds), end the membership of sessions on this machine whose process is
/// gone, read the shards held, then take or give back shards toward the
/// fair share.
/// Before a surplus shard is given back, `give_back` must agree: it marks
/// the shard so no new claim starts in it, and refuses while a delivery is
/// in flight there (see [`ShardTable::begin_release`]). Idle shards go
/// first; if too few are idle, busy ones are handed to `drain` (no new
/// claims there) and listed in [`Beat::draining`], so they are idle for a
/// later heartbeat. The caller clears the other marks once it has recorded
/// the result.
///
/// A node `leaving` (shutting down) is marked so in the membership table
/// already: it keeps its row fresh (its leases stay its own until given
/// back), is not counted in the shares, takes nothing, and treats every
/// shard it holds as surplus, so idle ones go back at once and busy ones as
/// they drain.
///
/// [`ShardTable::begin_release`]: super::shards::ShardTable::begin_release
pub(crate) async fn heartbeat(
    store: &Store,
    node: &str,
    session: &str,
    ttl_ms: i64,
    leaving: bool,
    give_back: impl Fn(u32) -> bool,
    drain: impl Fn(u32),
) -> Result<Beat, Error> {
    // Heartbeats are stamped and judged by the database's clock, so the
    // nodes' clocks play no part in who holds a lease.
    let clock = store.db().clock_sql();
    let free = free(clock);
    let db = store.db();
    let shards = store.shards_i64();
    let mut beat = Beat::default();
    let beaten = with_pool!(db, pool => {
        sqlx::query(&format!("UPDATE ttw_nodes SET heartbeat_at = {clock} WHERE node_id = $1 AND session = $2"))
            .bind(node)
            .bind(session)
            .execute(pool)
            .await?
            .rows_affected()
    });
    if beaten == 0 && !leaving {
        // The first heartbeat, or the row was lost: deleted by hand, or
        // taken by another session of this node id, which this takes back
        // (two live processes sharing a node id take it from each other in
        // turn; ids must be unique).
        with_pool!(db, pool => {
            sqlx::query(&format!(
                "INSERT INTO ttw_nodes (node_id, session, heartbeat_at, process, leaving) VALUES ($1, $2, {clock}, $3, 0) \
                 ON CONFLICT (node_id) DO UPDATE SET session = excluded.session, heartbeat_at = excluded.heartbeat_at, \
                 process = excluded.process, leaving = 0"
            ))
            .bind(node)
            .bind(session)
            .bind(process::identity())
            .execute(pool)
            .await?;
        });
    }
    let members: Vec<(String, String, Option<String>, i64)> = with_pool!(db, pool => {
        sqlx::query_as(&format!(
            "SELECT node_id, session, process, leaving FROM ttw_nodes WHERE heartbeat_at > {clock} - $1"
        ))
        .bind(ttl_ms)
        .fetch_all(pool)
        .await?
    });
    // This node counts itself unless leaving; a leaving node's row keeps
    // its leases live but it takes no share.
    let mut live = i64::from(!leaving);
    for (id, other, process, other_leaving) in members {
        if other == session {
            continue;
        }
        if process.as_deref().is_some_and(process::is_gone) {
            forget(store, &id, &other).await?;
            beat.gone.push(other);
        } else if other_leaving == 0 {
            live += 1;
        }
    }
    let mut owned: Vec<u32> = with_pool!(db, pool => {
        sqlx::query("SELECT shard FROM ttw_leases WHERE owner_session = $1")
            .bind(session)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| row.try_get::<i64, _>("shard").map(|s| s as u32))
            .collect::<Result<_, _>>()?
    });
    let target = if leaving {
        0
    } else {
        let live = live.max(1);
        ((shards + live - 1) / live) as usize
    };

    if owned.len() < target {
        let want = (target - owned.len()) as i64;
        // Start each node's search at a different shard so nodes joining
        // together do not all race for the same rows.
        let offset = i64::from(session_hash(session) % store.shards());
        let candidates: Vec<(i64, Option<String>)> = with_pool!(db, pool => {
            sqlx::query_as(&format!(
                "SELECT shard, owner_session FROM ttw_leases WHERE {free} \
                 ORDER BY (shard + $4) % $5 LIMIT $6"
            ))
            .bind(node)
            .bind(session)
            .bind(ttl_ms)
            .bind(offset)
            .bind(shards)
            .bind(want)
            .fetch_all(pool)
            .await?
        });
        if !candidates.is_empty() {
            let ids: Vec<i64> = candidates.iter().map(|c| c.0).collect();
            // The free condition again, so that of two nodes racing for a
            // shard only one gets it.
            let sql = format!(
                "UPDATE ttw_leases SET owner_node = $1, owner_session = $2, epoch = epoch + 1 \
                 WHERE {free} AND shard IN ({}) RETURNING shard",
                super::store::placeholders(4, ids.len())
            );
            let got: Vec<i64> = with_pool!(db, pool => {
                let mut query = sqlx::query(&sql).bind(node).bind(session).bind(ttl_ms);
                for id in &ids {
                    query = query.bind(id);
                }
                query
                    .fetch_all(pool)
                    .await?
                    .iter()
                    .map(|row| row.try_get::<i64, _>("shard"))
                    .collect::<Result<_, _>>()?
            });
            for shard in got {
                let had_owner = candidates.iter().any(|c| c.0 == shard && c.1.is_some());
                if had_owner {
                    beat.takeovers += 1;
                }
                beat.acquired.push(shard as u32);
                owned.push(shard as u32);
            }
        }
    } else if owned.len() > target {
        // Give back surplus shards that have nothing in flight, so a node
        // that joined can take them without waiting for a lease to expire.
        let surplus = owned.len() - target;
        // Highest first, in a stable order, so that the shards drained by
        // one heartbeat are the ones the next one gives back.
        owned.sort_unstable();
        let mut give: Vec<u32> = Vec::with_capacity(surplus);
        for &shard in owned.iter().rev() {
            if give.len() == surplus {
                break;
            }
            if give_back(shard) {
                give.push(shard);
            }
        }
        // Under steady load a shard may never be idle when a heartbeat
        // looks: drain busy ones instead of waiting for luck.
        for &shard in owned.iter().rev() {
            if give.len() + beat.draining.len() >= surplus {
                break;
            }
            if !give.contains(&shard) {
                drain(shard);
                beat.draining.push(shard);
            }
        }
        if !give.is_empty() {
            release(store, session, Some(&give)).await?;
            owned.retain(|s| !give.contains(s));
        }
    }
    owned.sort_unstable();
    beat.owned = owned;
    Ok(beat)
}

/// Gives back this session's leases (all of them, or `only` these) so
/// others can take them at once.
pub(crate) async fn release(
    store: &Store,
    session: &str,
    only: Option<&[u32]>,
) -> Result<(), Error> {
    let list = only.map(|s| s.iter().map(|&x| i64::from(x)).collect::<Vec<_>>());
    let sql = match &list {
        None => "UPDATE ttw_leases SET owner_node = NULL, owner_session = NULL \
                 WHERE owner_session = $1"
            .to_string(),
        Some(list) => format!(
            "UPDATE ttw_leases SET owner_node = NULL, owner_session = NULL \
             WHERE owner_session = $1 AND shard IN ({})",
            super::store::placeholders(2, list.len())
        ),
    };
    with_pool!(store.db(), pool => {
        let mut query = sqlx::query(&sql).bind(session);
        for shard in list.iter().flatten() {
            query = query.bind(shard);
        }
        query.execute(pool).await?;
    });
    Ok(())
}

/// Marks the node as leaving (a graceful shutdown has begun): the others
/// stop counting it when they work out their shares, while its row, and so
/// the leases it has not given back yet, stay live as it heartbeats.
pub(crate) async fn leave(store: &Store, node: &str, session: &str) -> Result<(), Error> {
    on_member(store, "UPDATE ttw_nodes SET leaving = 1", node, session).await
}

/// Removes a session's membership row: the end of a graceful shutdown, or
/// a session whose process was found gone.
pub(crate) async fn forget(store: &Store, node: &str, session: &str) -> Result<(), Error> {
    on_member(store, "DELETE FROM ttw_nodes", node, session).await
}

/// Runs `statement` on the membership row of `node` in session `session`.
async fn on_member(store: &Store, statement: &str, node: &str, session: &str) -> Result<(), Error> {
    let sql = format!("{statement} WHERE node_id = $1 AND session = $2");
    with_pool!(store.db(), pool => {
        sqlx::query(&sql).bind(node).bind(session).execute(pool).await?;
    });
    Ok(())
}

fn session_hash(session: &str) -> u32 {
    // FNV-1a: a spread, not a secret.
    let mut h: u32 = 0x811c_9dc5;
    for b in session.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}
