//! A node's parts for the duties' tests: an in-memory store of 4 shards
//! and one queue, and each handle a duty takes, on the system's clock. No
//! node and no scheduler: a test hands a duty its parts and reads what it
//! did in the store, the window and the wake-ups.

use std::sync::Arc;

use tokio_timing_wheel::{Expirations, TimingWheel};

use crate::client::store::Store;
use crate::model::due::Due;
use crate::model::lanes::Lanes;
use crate::model::queue::DEFAULT_QUEUE;
use crate::node::config::Config;
use crate::node::duties::heartbeat::Beat;
use crate::node::duties::loader::Load;
use crate::node::duties::recurring::Occurring;
use crate::node::duties::rescuer::{Reclaim, Rescuer};
use crate::node::events::{Events, Reporter};
use crate::node::faults::Faults;
use crate::node::lease::{Leases, Membership};
use crate::node::report::LockWatch;
use crate::node::wakes::Wakes;
use crate::node::window::Window;
use crate::sql::claims::Claims;

pub(crate) struct Parts {
    pub(crate) store: Store,
    pub(crate) config: Config,
    pub(crate) claims: Claims,
    pub(crate) leases: Arc<Leases>,
    pub(crate) window: Arc<Window>,
    /// What the window's wheel fires.
    pub(crate) fired: Expirations<i64, Due>,
    pub(crate) events: Arc<Events>,
    pub(crate) locks: Arc<LockWatch>,
    pub(crate) wakes: Arc<Wakes>,
    pub(crate) faults: Arc<Faults>,
    pub(crate) rescuer: Arc<Rescuer>,
}

impl Parts {
    pub(crate) async fn new() -> Parts {
        let store = Store::builder().shards(4).sqlite_in_memory().await.unwrap();
        let config = Config::default().settle().unwrap();
        let lanes = Arc::new(Lanes::new(vec![DEFAULT_QUEUE.into()], 4).unwrap());
        let session = "n1/session".to_string();
        let claims = Claims::new(store.db().clone(), lanes.clone(), 4, session.clone());
        let leases = Arc::new(Leases::new(
            store.db().clone(),
            lanes.clone(),
            4,
            "n1".into(),
            session,
            10_000,
        ));
        let (wheel, fired) = TimingWheel::builder().build::<i64, Due>();
        let window = Arc::new(Window::new(wheel, lanes.clone(), config.clock.clone()));
        let events = Arc::new(Events::new("n1", lanes.queues()));
        let locks = Arc::new(LockWatch::new(config.lock_span()));
        let rescuer = Arc::new(Rescuer::new(&config, locks.clone()));
        Parts {
            store,
            config,
            claims,
            leases,
            window,
            fired,
            events,
            locks,
            wakes: Arc::default(),
            faults: Arc::default(),
            rescuer,
        }
    }

    pub(crate) fn reporter(&self) -> Reporter {
        Reporter::new(self.events.clone(), self.locks.clone())
    }

    pub(crate) fn beat(&self) -> Beat {
        Beat {
            node_id: "n1".into(),
            leases: self.leases.clone(),
            window: self.window.clone(),
            membership: Arc::new(Membership::default()),
            rescuer: self.rescuer.clone(),
            wakes: self.wakes.clone(),
            events: self.events.clone(),
            faults: self.faults.clone(),
        }
    }

    pub(crate) fn load(&self) -> Load {
        Load {
            claims: self.claims.clone(),
            window: self.window.clone(),
            clock: self.config.clock.clone(),
            ahead: self.config.window,
            faults: self.faults.clone(),
        }
    }

    pub(crate) fn reclaim(&self) -> Reclaim {
        Reclaim {
            claims: self.claims.clone(),
            clock: self.config.clock.clone(),
            window: self.window.clone(),
            events: self.events.clone(),
        }
    }

    pub(crate) fn occurring(&self) -> Occurring {
        Occurring {
            store: self.store.clone(),
            claims: self.claims.clone(),
            clock: self.config.clock.clone(),
        }
    }

    /// Takes every shard: the first heartbeat of a node alone.
    pub(crate) async fn take_shards(&self) {
        self.leases.add_lease_rows().await.unwrap();
        self.beat().beat().await.unwrap();
        assert_eq!(self.window.shards.owned_count(), 4);
    }

    /// Timers in the window's wheel.
    pub(crate) async fn armed(&self) -> usize {
        self.window.wheel().stats().await.unwrap().pending
    }
}
