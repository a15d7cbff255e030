//! The durable tests' record of a delivery (task, attempt, when it ran,
//! when it was due), and what they ask of a log of them. Needs `log.rs`
//! beside it as `mod log`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::time::SystemTime;

use ttw_durable::TaskId;

use super::log::{self, Record};

/// One delivery a handler saw: task, attempt, when it ran, when it was due.
pub type Seen = (TaskId, u32, SystemTime, SystemTime);

/// What a handler saw.
pub type Log = log::Log<Seen>;

impl Record for Seen {
    fn record(task: &ttw_durable::Task) -> Self {
        (task.id(), task.attempt(), SystemTime::now(), task.run_at())
    }
}

impl Log {
    /// Deliveries per task.
    pub fn per_task(&self) -> HashMap<TaskId, usize> {
        let mut map = HashMap::new();
        for (id, ..) in self.0.lock().unwrap().iter() {
            *map.entry(*id).or_default() += 1;
        }
        map
    }

    /// Panics if any delivery started before its task was due.
    pub fn assert_never_early(&self) {
        for (id, attempt, ran, due) in self.0.lock().unwrap().iter() {
            assert!(
                ran >= due,
                "task {id} attempt {attempt} ran {:?} early",
                due.duration_since(*ran).unwrap()
            );
        }
    }
}
