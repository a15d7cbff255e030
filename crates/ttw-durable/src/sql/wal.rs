//! The WAL's size and what a checkpoint needs, read from the WAL file
//! itself (SQLite's "WAL-mode File Format"), without a statement and
//! without touching the `-shm` file, for the checkpointer
//! ([`checkpoint`](crate::sql::checkpoint)).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// How many bytes the database file at `db` must grow by to take in the
/// WAL at `wal`: the size its last commit gives the database, less the
/// file's size now. `None` if either cannot be read.
pub(crate) fn growth(db: &Path, wal: &Path) -> Option<u64> {
    let mut file = std::fs::File::open(wal).ok()?;
    let len = file.metadata().ok()?.len();
    let frames = wal_frames(&mut file, len)?;
    let pages = frames.db_pages?;
    let now = std::fs::metadata(db).ok()?.len();
    Some(pages.saturating_mul(frames.page).saturating_sub(now))
}

/// `path` with `suffix` after its file name (`-wal`, `-shm`).
pub(crate) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

/// The bytes of the WAL's content now, without a statement: its valid
/// frames times their size, read from the WAL file itself (SQLite's
/// "WAL-mode File Format"). The size of the file does not tell: it keeps
/// its size when the WAL starts over, and the frames written since are a
/// prefix of it, each with the salts of the WAL's header; frames left from
/// before carry older salts. So a binary search on the salts finds the end
/// (a dozen reads of 24 bytes for a 64 MiB file).
///
/// The `-shm` file's header says the same (`mxFrame`), but reading it
/// meant opening and closing that file, and closing any descriptor of a
/// file drops every POSIX lock the process holds on it, SQLite's own among
/// them: another process then took the wal-index for unused and cut it
/// back while this one had it mapped (SIGBUS in `walFindFrame`), and its
/// readers' locks no longer kept the WAL from starting over under them.
/// SQLite takes no locks on the WAL file.
pub(crate) fn wal_bytes(wal: &Path) -> u64 {
    let Ok(mut file) = std::fs::File::open(wal) else {
        return 0;
    };
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return 0;
    };
    wal_frames(&mut file, len).map_or(0, |w| w.frames.saturating_mul(w.frame()))
}

/// What the frame headers of a WAL file say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WalFrames {
    /// The valid frames.
    frames: u64,
    /// The database's page size.
    page: u64,
    /// The database's size in pages after the last commit among them.
    db_pages: Option<u64>,
}

impl WalFrames {
    /// Bytes in a frame: its header and a page.
    fn frame(&self) -> u64 {
        FRAME_HEADER + self.page
    }
}

/// Bytes in the WAL's header and in a frame's.
const WAL_HEADER: u64 = 32;
const FRAME_HEADER: u64 = 24;

/// The valid frames of the WAL in `file` (`len` bytes long); `None` if it
/// has no header.
fn wal_frames(file: &mut (impl Read + Seek), len: u64) -> Option<WalFrames> {
    let mut header = [0u8; WAL_HEADER as usize];
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_exact(&mut header).ok()?;
    let word = |b: &[u8], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    // The magic number, either byte order of the checksums.
    if word(&header, 0) & !1 != 0x377f_0682 {
        return None;
    }
    let page = u64::from(word(&header, 8));
    let page = if page == 1 { 65536 } else { page };
    let frame = FRAME_HEADER + page;
    let salts: [u8; 8] = header[16..24].try_into().ok()?;
    // The header of frame `i`, if it carries the WAL's salts.
    let mut valid = |i: u64| -> Option<[u8; FRAME_HEADER as usize]> {
        let mut head = [0u8; FRAME_HEADER as usize];
        file.seek(SeekFrom::Start(WAL_HEADER + i * frame)).ok()?;
        file.read_exact(&mut head).ok()?;
        (head[8..16] == salts).then_some(head)
    };
    // Frames `..lo` are valid, frames `hi..` are not.
    let (mut lo, mut hi) = (0, len.saturating_sub(WAL_HEADER) / frame);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if valid(mid).is_some() {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    // The last commit frame: its header gives the database's size.
    let db_pages = (0..lo)
        .rev()
        .take(4096)
        .filter_map(|i| valid(i).map(|h| u64::from(word(&h, 4))))
        .find(|&pages| pages > 0);
    Some(WalFrames {
        frames: lo,
        page,
        db_pages,
    })
}
