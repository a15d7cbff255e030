//! Several drivers inside one process (`Builder::shards`): each owns a wheel
//! and a command channel, and a key always goes to the shard of its hash, so
//! every command for one key stays in one ordered channel.

use std::fmt;
use std::hash::{BuildHasher, Hash};

use hashbrown::DefaultHashBuilder;

use crate::channel::Sender;
use crate::command::Command;

pub(crate) struct Shards<K, V> {
    senders: Box<[Sender<Command<K, V>>]>,
    /// The runtime the drivers run on, for work that must finish even if
    /// the caller's future is dropped (stopping every shard once one has
    /// stopped).
    runtime: tokio::runtime::Handle,
    /// One hasher for every handle, so a key maps to one shard everywhere.
    hasher: DefaultHashBuilder,
}

impl<K: Hash, V> Shards<K, V> {
    pub(crate) fn new(
        senders: Vec<Sender<Command<K, V>>>,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        debug_assert!(!senders.is_empty());
        Shards {
            senders: senders.into_boxed_slice(),
            runtime,
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// The channel of the shard that owns `key`.
    pub(crate) fn for_key(&self, key: &K) -> &Sender<Command<K, V>> {
        match self.senders.len() {
            1 => &self.senders[0],
            n => &self.senders[(self.hasher.hash_one(key) % n as u64) as usize],
        }
    }
}

impl<K, V> Shards<K, V> {
    /// Every shard's channel; the first one decides who stops the wheel.
    pub(crate) fn all(&self) -> &[Sender<Command<K, V>>] {
        &self.senders
    }

    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.senders[0].is_closed()
    }

    pub(crate) fn queued(&self) -> usize {
        self.senders.iter().map(Sender::queued).sum()
    }
}

impl<K, V> fmt::Debug for Shards<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shards")
            .field("count", &self.senders.len())
            .finish()
    }
}
