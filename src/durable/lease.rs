//! Membership and shard leases: each node heartbeats in `ttw_nodes`, renews
//! the leases it holds, takes free or expired ones up to its fair share
//! (`ceil(shards / live nodes)`), and gives back surplus when nodes join
//! (draining busy shards first, so steady load cannot hold them forever).
//!
//! A lease row names its owner twice: the node id (stable across restarts)
//! and the session (new every time a scheduler starts). Every claim and
//! completion checks the session, and completions also check the epoch the
//! claim stamped, so a node that lost a lease (a pause, a partition, or a
//! restart that took its shards back) fails in the database, whatever the
//! clocks say. Expiry times only decide when a lease may be taken over.

use sqlx::Row;

use super::store::{now_ms, with_pool, Store};
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
}

/// One heartbeat of node `node` (session `session`): record liveness, renew
/// held leases, then take or give back shards toward the fair share.
/// Before a surplus shard is given back, `give_back` must agree: it marks
/// the shard so no new claim starts in it, and refuses while a delivery is
/// in flight there (see [`ShardTable::begin_release`]). Idle shards go
/// first; if too few are idle, busy ones are handed to `drain` (no new
/// claims there) and listed in [`Beat::draining`], so they are idle for a
/// later heartbeat. The caller clears the other marks once it has recorded
/// the result.
///
/// A node `leaving` (shutting down) has left the membership table already:
/// it does not come back in, takes nothing, and treats every shard it holds
/// as surplus, so idle ones go back at once and busy ones as they drain.
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
    let now = now_ms();
    let db = store.db();
    let shards = store.shards_i64();
    if !leaving {
        with_pool!(db, pool => {
        sqlx::query(
            "INSERT INTO ttw_nodes (node_id, session, heartbeat_at) VALUES ($1, $2, $3) \
             ON CONFLICT (node_id) DO UPDATE SET session = excluded.session, heartbeat_at = excluded.heartbeat_at",
        )
        .bind(node)
        .bind(session)
        .bind(now)
        .execute(pool)
        .await?;
        });
    }
    let mut owned: Vec<u32> = with_pool!(db, pool => {
        sqlx::query("UPDATE ttw_leases SET expires_at = $1 WHERE owner_session = $2 RETURNING shard")
            .bind(now + ttl_ms)
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
        let live: i64 = with_pool!(db, pool => {
            sqlx::query("SELECT COUNT(*) AS n FROM ttw_nodes WHERE heartbeat_at > $1")
                .bind(now - ttl_ms)
                .fetch_one(pool)
                .await?
                .try_get("n")?
        });
        let live = live.max(1);
        ((shards + live - 1) / live) as usize
    };
    let mut beat = Beat::default();

    if owned.len() < target {
        let want = (target - owned.len()) as i64;
        // Start each node's search at a different shard so nodes joining
        // together do not all race for the same rows.
        let offset = i64::from(session_hash(session) % store.shards());
        let free = "(owner_session IS NULL OR expires_at < $3 OR (owner_node = $1 AND owner_session <> $2))";
        let candidates: Vec<(i64, Option<String>)> = with_pool!(db, pool => {
            sqlx::query_as(&format!(
                "SELECT shard, owner_session FROM ttw_leases WHERE {free} \
                 ORDER BY (shard + $4) % $5 LIMIT $6"
            ))
            .bind(node)
            .bind(session)
            .bind(now)
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
                "UPDATE ttw_leases SET owner_node = $1, owner_session = $2, epoch = epoch + 1, expires_at = $4 \
                 WHERE {free} AND shard IN ({}) RETURNING shard",
                super::store::placeholders(5, ids.len())
            );
            let got: Vec<i64> = with_pool!(db, pool => {
                let mut query = sqlx::query(&sql).bind(node).bind(session).bind(now).bind(now + ttl_ms);
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
        None => "UPDATE ttw_leases SET owner_node = NULL, owner_session = NULL, expires_at = 0 \
                 WHERE owner_session = $1"
            .to_string(),
        Some(list) => format!(
            "UPDATE ttw_leases SET owner_node = NULL, owner_session = NULL, expires_at = 0 \
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

/// Removes the node's membership row (a graceful leave).
pub(crate) async fn leave(store: &Store, node: &str, session: &str) -> Result<(), Error> {
    with_pool!(store.db(), pool => {
        sqlx::query("DELETE FROM ttw_nodes WHERE node_id = $1 AND session = $2")
            .bind(node)
            .bind(session)
            .execute(pool)
            .await?;
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
