//! A disk reserve beside an SQLite database file: space held back so that
//! a checkpoint can always move the write-ahead log into the database file
//! after the disk has been full.
//!
//! Without it delivery could stall for good after a full disk. The WAL file
//! keeps its size when SQLite starts it over, and while the database file
//! cannot grow, commits go on into the WAL; once space returns, the store's
//! own writes grew the WAL into it before a checkpoint had moved the log
//! into the database file (on an 8 MiB tmpfs: WAL 6.8 MB, database 1.5 MB,
//! nothing free). The checkpoint that would start the WAL over then had no
//! room to grow the database file, and every write failed with "database
//! or disk is full" for as long as the process ran.
//!
//! So once a checkpoint meets a full disk, the checkpointer watches the
//! space (see [`checkpoint`](crate::sql::checkpoint)): as soon as the
//! database file has room to take in the WAL, it finishes a checkpoint
//! inside its write turn, so that no write of this process takes the room
//! first, and the checkpoint also cuts the WAL's file to nothing
//! (`TRUNCATE`). And a store on SQLite allocates `tasks.db-reserve` next to
//! `tasks.db` (by default the smaller of 16 MiB and an eighth of the file
//! system): when the room the checkpoint needs is there only with the
//! reserve's, the reserve is deleted just before that checkpoint. Given up
//! sooner, while the disk stays full, its space would only go to the next
//! writes. It is taken back once the disk has twice its size free.
//! Processes sharing a database share its reserve: its state is the file
//! itself.

use std::path::{Path, PathBuf};

/// The default reserve, at most: 16 MiB.
const DEFAULT_MOST: u64 = 16 << 20;

/// A reserve file, or none (size 0, or an in-memory database).
#[derive(Debug, Clone)]
pub(crate) struct Reserve {
    path: PathBuf,
    size: u64,
}

impl Reserve {
    /// The reserve of the database file at `db`: `size` bytes, or by
    /// default the smaller of 16 MiB and an eighth of its file system.
    pub(crate) fn beside(db: &Path, size: Option<u64>) -> Reserve {
        let mut name = db.as_os_str().to_owned();
        name.push("-reserve");
        let path = PathBuf::from(name);
        let size = size.unwrap_or_else(|| {
            let dir = db
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            fs4::total_space(dir).map_or(0, |total| (total / 8).min(DEFAULT_MOST))
        });
        Reserve { path, size }
    }

    /// Its size in bytes (0: no reserve).
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The bytes free on the file system of the database (0 if it cannot
    /// be read).
    pub(crate) fn free(&self) -> u64 {
        fs4::available_space(self.dir()).unwrap_or(0)
    }

    /// The folder of the reserve and the database.
    fn dir(&self) -> &Path {
        match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        }
    }

    /// Whether the reserve file is there at its full size.
    pub(crate) fn held(&self) -> bool {
        self.size == 0 || std::fs::metadata(&self.path).is_ok_and(|m| m.len() >= self.size)
    }

    /// Takes the reserve (back) if it is not held and the disk has at least
    /// twice its size free, so that taking it never fills the disk itself.
    /// Returns whether it is held now. Errors leave it as it was: it is
    /// tried again at the next checkpoint.
    pub(crate) fn take(&self) -> bool {
        if self.held() {
            return true;
        }
        if self.free() < self.size.saturating_mul(2) {
            return false;
        }
        let allocated = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.path)
            .and_then(|file| fs4::FileExt::allocate(&file, self.size));
        match allocated {
            Ok(()) => {
                tracing::debug!(path = %self.path.display(), bytes = self.size, "disk reserve taken");
                true
            }
            Err(err) => {
                tracing::debug!(error = %err, "the disk reserve could not be taken");
                let _ = std::fs::remove_file(&self.path);
                false
            }
        }
    }

    /// Gives the reserve's space back to the file system. Returns whether
    /// there was one to give.
    pub(crate) fn give_up(&self) -> bool {
        if self.size == 0 {
            return false;
        }
        let given = std::fs::remove_file(&self.path).is_ok();
        if given {
            tracing::warn!(
                path = %self.path.display(),
                bytes = self.size,
                "the disk is full: the disk reserve was given up so that a checkpoint can \
                 finish; it is taken back once twice its size is free"
            );
        }
        given
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_is_taken_given_up_and_taken_back() {
        let dir = std::env::temp_dir().join(format!("ttw-reserve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let reserve = Reserve::beside(&dir.join("tasks.db"), Some(1 << 20));
        assert!(!reserve.held());
        assert!(reserve.take());
        let file = dir.join("tasks.db-reserve");
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 1 << 20);
        assert!(reserve.give_up());
        assert!(!file.exists() && !reserve.held());
        assert!(!reserve.give_up(), "nothing left to give");
        assert!(reserve.take() && reserve.held());
        let none = Reserve::beside(&dir.join("other.db"), Some(0));
        assert!(none.held() && !none.give_up());
        assert!(!dir.join("other.db-reserve").exists());
        let default = Reserve::beside(&dir.join("third.db"), None);
        assert!(default.size() > 0 && default.size() <= DEFAULT_MOST);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
