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

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::error::Error;
use crate::model::lanes::Lanes;
use crate::node::process;
use crate::sql::db::{fnv1a, Db};
use crate::sql::leases::{self, Search, Session};
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

/// Whether the node counts itself in, and the lock under which a heartbeat
/// writes its membership and leases.
#[derive(Debug, Default)]
pub(crate) struct Membership {
    /// Held by a heartbeat while it writes membership and leases, and by a
    /// shutdown while it starts leaving: a heartbeat that began before
    /// `leaving` was set must not write the membership row (counted in the
    /// shares again) after the shutdown marked it leaving.
    pub(crate) lock: tokio::sync::Mutex<()>,
    /// Shutting down: heartbeats give shards back as they come idle.
    pub(crate) leaving: AtomicBool,
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

    /// This session, as its statements name it.
    fn me(&self) -> Session<'_> {
        Session {
            node: &self.node,
            session: &self.session,
            ttl_ms: self.ttl_ms,
        }
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
        let around = leases::look_around(&self.db, self.me()).await?;
        let alive = around.stamped;
        let members = around.members;
        // A lease of a queue this session does not serve cannot be:
        // sessions are never reused.
        let mut owned: Vec<u32> = around
            .leases
            .iter()
            .filter_map(|lease| {
                let index = self.lanes.queue_index(&lease.queue)?;
                Some(self.lanes.lane_of(index, lease.shard as u32))
            })
            .collect();
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
        // A count for the console: its write failing must not cost the beat
        // the shards it took.
        if beat.takeovers > 0 {
            if let Err(err) = leases::count_takeovers(&self.db, self.me(), beat.takeovers).await {
                tracing::warn!(
                    takeovers = beat.takeovers,
                    "the takeovers were not recorded: {err}"
                );
            }
        }
        Ok(beat)
    }

    /// Writes this session's membership row: the first heartbeat, or the
    /// row was lost (deleted by hand, or taken by another session of this
    /// node id, which this takes back: two live processes sharing a node
    /// id take it from each other in turn; ids must be unique).
    async fn join(&self) -> Result<(), Error> {
        let process = process::identity();
        leases::join(
            &self.db,
            self.me(),
            leases::Joining {
                process,
                queues: &self.lanes.joined(),
            },
        )
        .await
    }

    /// Takes up to `want` free shards of the queue at `index`. Returns the
    /// lanes taken, and how many of them had an owner before (takeovers).
    async fn take_free(&self, index: usize, want: usize) -> Result<(Vec<u32>, u64), Error> {
        let queue: &str = &self.lanes.queues()[index];
        // Start each node's search at a different shard so nodes joining
        // together do not all race for the same rows.
        let search = Search {
            queue,
            shards: i64::from(self.shards),
            offset: (fnv1a(self.session.as_bytes()) % u64::from(self.shards)) as i64,
            want: want as i64,
        };
        let candidates = leases::free_shards(&self.db, self.me(), search).await?;
        let wanted: Vec<i64> = candidates.iter().map(|c| c.shard).collect();
        let got = leases::take(
            &self.db,
            self.me(),
            leases::Shards {
                queue,
                shards: &wanted,
            },
        )
        .await?;
        let takeovers = got
            .iter()
            .filter(|&&shard| {
                candidates
                    .iter()
                    .any(|c| c.shard == shard && c.owner_session.is_some())
            })
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
            return leases::release_all(&self.db, &self.session).await;
        };
        for (index, queue) in self.lanes.queues().iter().enumerate() {
            let lanes = self.lanes.lanes_of(index);
            let shards: Vec<i64> = only
                .iter()
                .filter(|l| lanes.contains(l))
                .map(|&l| i64::from(self.lanes.shard_of(l)))
                .collect();
            leases::release(
                &self.db,
                &self.session,
                leases::Shards {
                    queue,
                    shards: &shards,
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Marks the node as leaving (a graceful shutdown has begun): the others
    /// stop counting it when they work out their shares, while its row, and
    /// so the leases it has not given back yet, stay live as it heartbeats.
    pub(crate) async fn leave(&self) -> Result<(), Error> {
        leases::mark_leaving(&self.db, &self.node, &self.session).await
    }

    /// Removes this session's membership row: the end of a graceful
    /// shutdown.
    pub(crate) async fn forget(&self) -> Result<(), Error> {
        self.end_membership(&self.node, &self.session).await
    }

    /// Removes a session's membership row: this one's at the end of a
    /// graceful shutdown, or another whose process was found gone.
    async fn end_membership(&self, node: &str, session: &str) -> Result<(), Error> {
        leases::end_membership(&self.db, node, session).await
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
