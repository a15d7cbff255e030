//! When a SQLite commit reaches the disk: what an acknowledged task
//! survives ([`StoreBuilder::sqlite_commits`](crate::StoreBuilder::sqlite_commits)).

use crate::error::Error;

/// SQLite only: when a commit reaches the disk, and so what an
/// acknowledged task survives
/// ([`StoreBuilder::sqlite_commits`](crate::StoreBuilder::sqlite_commits)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Commits {
    /// Written to the operating system at each commit, to the disk at each
    /// checkpoint (SQLite's `synchronous = NORMAL` in WAL mode): an
    /// acknowledged task survives its process being killed, but a power
    /// cut or an operating system crash can lose the commits since the
    /// last checkpoint (a fraction of a second to seconds of them). The
    /// default.
    #[default]
    Flushed,
    /// Written to the disk (`fsync`) before each commit returns (SQLite's
    /// `synchronous = FULL`): an acknowledged task survives a power cut,
    /// at the cost of an `fsync` per commit.
    Synced,
}

impl std::str::FromStr for Commits {
    type Err = Error;

    /// `flushed` or `synced` (SQLite's names, `normal` and `full`, too).
    fn from_str(s: &str) -> Result<Commits, Error> {
        match s {
            "flushed" | "normal" => Ok(Commits::Flushed),
            "synced" | "full" => Ok(Commits::Synced),
            _ => Err(Error::config(format!(
                "`{s}` is neither `flushed` (survives a killed process) nor `synced` (survives a power cut)"
            ))),
        }
    }
}
