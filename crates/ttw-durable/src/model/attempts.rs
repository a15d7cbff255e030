//! The history of a task's attempts: what a target says of a delivery that
//! succeeded ([`Receipt`]), and one attempt as it is read back
//! ([`AttemptInfo`], [`AttemptOutcome`]).
//!
//! Where they are kept: a failed attempt (retried or dead) and an attempt a
//! crash cut short (taken back by the reclaim) are rows of `ttw_attempts`,
//! written by the statement that records the outcome, in its transaction.
//! The attempt that succeeded is kept on the task's own row of
//! `ttw_history` (when it started, the node, the status and the answer),
//! written by the statement that moves the task there: the fast path
//! writes no row more than before. The attempt running now is read from
//! the task. [`Store::attempts`](crate::Store::attempts) puts them
//! together, in order.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

/// The most bytes an attempt keeps of its detail (the answer's first bytes,
/// or the error): a longer one is cut at a character boundary.
pub const MAX_ATTEMPT_DETAIL: usize = 1024;

/// What a target says of a delivery that succeeded, kept with the attempt:
/// the status of the answer (an HTTP status) and its first bytes (at most
/// [`MAX_ATTEMPT_DETAIL`]).
///
/// # Examples
///
/// ```
/// use ttw_durable::Receipt;
///
/// let receipt = Receipt::status(204).answer("ok");
/// assert_eq!(receipt.status_code(), Some(204));
/// assert_eq!(receipt.answer_text(), Some("ok"));
/// assert!(Receipt::none().is_empty() && !receipt.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Receipt {
    status: Option<u16>,
    answer: Option<String>,
}

impl Receipt {
    /// A receipt that says nothing more than "delivered" (a handler's).
    pub fn none() -> Receipt {
        Receipt::default()
    }

    /// A receipt with this status (an HTTP status).
    pub fn status(status: u16) -> Receipt {
        Receipt {
            status: Some(status),
            answer: None,
        }
    }

    /// With the answer's first bytes ([`MAX_ATTEMPT_DETAIL`] at most; a
    /// longer text is cut at a character boundary).
    #[must_use]
    pub fn answer(mut self, answer: impl Into<String>) -> Receipt {
        self.answer = Some(bounded(answer.into()));
        self
    }

    /// Whether it says nothing more than "delivered" ([`Receipt::none`]).
    pub fn is_empty(&self) -> bool {
        self.status.is_none() && self.answer.is_none()
    }

    /// The status, if there is one.
    pub fn status_code(&self) -> Option<u16> {
        self.status
    }

    /// The answer's first bytes, if there are any.
    pub fn answer_text(&self) -> Option<&str> {
        self.answer.as_deref()
    }
}

/// `text` cut to at most [`MAX_ATTEMPT_DETAIL`] bytes, at a character
/// boundary.
pub(crate) fn bounded(mut text: String) -> String {
    let end = bounded_str(&text).len();
    text.truncate(end);
    text
}

/// `text`'s first [`MAX_ATTEMPT_DETAIL`] bytes at most, at a character
/// boundary.
pub(crate) fn bounded_str(text: &str) -> &str {
    if text.len() <= MAX_ATTEMPT_DETAIL {
        return text;
    }
    let mut end = MAX_ATTEMPT_DETAIL;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The first `most` bytes of `bytes` at most, as text: cut at the last
/// character boundary at or below `most`, never inside a character, so a
/// text cut short never ends in a U+FFFD it did not have. Bytes that are
/// not UTF-8 anywhere before the cut are each shown as U+FFFD, and the
/// text is then bounded again at a character boundary.
#[cfg_attr(not(feature = "webhook"), allow(dead_code))]
pub(crate) fn text_prefix(bytes: &[u8], most: usize) -> String {
    let mut end = bytes.len().min(most);
    if end < bytes.len() {
        // A character cut by the bound starts in its last three bytes: a
        // lead byte whose sequence needs more than what is left is dropped.
        for back in 1..=end.min(3) {
            let b = bytes[end - back];
            if b & 0xC0 == 0x80 {
                continue;
            }
            let needs = match b {
                0xF0..=0xF7 => 4,
                0xE0..=0xEF => 3,
                0xC0..=0xDF => 2,
                _ => 1,
            };
            if needs > back {
                end -= back;
            }
            break;
        }
    }
    let text = String::from_utf8_lossy(&bytes[..end]);
    let mut cut = text.len().min(most);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text[..cut].to_string()
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptOutcome {
    /// Running now.
    Running,
    /// Succeeded: the task is done.
    Done,
    /// Failed; the task was scheduled again.
    Failed,
    /// Failed, and the task is dead (out of attempts, or a permanent
    /// failure).
    Dead,
    /// Cut short without an outcome (its node died, or its lock ran out):
    /// the task was taken back by the reclaim and delivered again, or dead
    /// when out of attempts.
    Interrupted,
    /// A worker's lease ran out before it settled its claim (see
    /// [`Pulls`](crate::Pulls)): the task was due again, or dead when out
    /// of attempts.
    Expired,
}

impl AttemptOutcome {
    /// The outcome's name, as stored and as the service shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Running => "running",
            AttemptOutcome::Done => "done",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Dead => "dead",
            AttemptOutcome::Interrupted => "interrupted",
            AttemptOutcome::Expired => "expired",
        }
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AttemptOutcome {
    type Err = crate::error::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "running" => AttemptOutcome::Running,
            "done" => AttemptOutcome::Done,
            "failed" => AttemptOutcome::Failed,
            "dead" => AttemptOutcome::Dead,
            "interrupted" => AttemptOutcome::Interrupted,
            "expired" => AttemptOutcome::Expired,
            other => {
                return Err(crate::error::Error::corrupt(format!(
                    "unknown attempt outcome {other:?}"
                )))
            }
        })
    }
}

/// One attempt of a task, as [`Store::attempts`](crate::Store::attempts)
/// reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptInfo {
    /// Its number among the task's attempts since it was scheduled or last
    /// redriven (1 for the first).
    pub attempt: u32,
    /// The task's claim count at this attempt: it grows across redrives,
    /// so it names one attempt of the task's whole life.
    pub claim: i64,
    /// How it ended, or [`AttemptOutcome::Running`].
    pub outcome: AttemptOutcome,
    /// The node that ran it (its id), when known.
    pub node: Option<String>,
    /// When it was claimed, when known (tasks that ran before attempts
    /// were kept have no start).
    pub started_at: Option<SystemTime>,
    /// When its outcome was written (`None` while running).
    pub ended_at: Option<SystemTime>,
    /// The answer's status (an HTTP status) when the target reported one.
    pub status: Option<u16>,
    /// The answer's first bytes (a success) or the error (a failure), at
    /// most [`MAX_ATTEMPT_DETAIL`] bytes.
    pub detail: Option<String>,
}

impl AttemptInfo {
    /// How long it took, when both ends are known.
    pub fn duration(&self) -> Option<std::time::Duration> {
        self.ended_at?.duration_since(self.started_at?).ok()
    }
}

/// The node id of a session (`node/random`, see the scheduler).
pub(crate) fn node_of(session: &str) -> &str {
    session.rsplit_once('/').map_or(session, |(node, _)| node)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A detail is cut to its bound at a character boundary, never in the
    /// middle of one; a short one is kept whole.
    #[test]
    fn a_detail_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_ATTEMPT_DETAIL);
        let cut = bounded(long.clone());
        assert!(cut.len() <= MAX_ATTEMPT_DETAIL && cut.len() >= MAX_ATTEMPT_DETAIL - 1);
        assert!(long.starts_with(&cut));
        assert_eq!(bounded_str(&long), cut);
        assert_eq!(bounded("short".into()), "short");
        let receipt = Receipt::status(200).answer("x".repeat(5000));
        assert_eq!(receipt.answer_text().unwrap().len(), MAX_ATTEMPT_DETAIL);
    }

    /// The report: an answer of 4-byte characters cut at 1,024 bytes (or
    /// 256 in an error) ended in U+FFFD, a character it never had: the
    /// bytes were cut at the bound, inside a character, and decoded
    /// lossily. Cut at the last boundary at or below the bound, for
    /// characters of every width at every offset from the bound.
    #[test]
    fn a_text_cut_from_bytes_ends_at_a_character_boundary() {
        for ch in ["a", "é", "€", "😀"] {
            for pad in 0..4 {
                let text = format!("{}{}", "a".repeat(pad), ch.repeat(100_000 / ch.len()));
                for most in [1, 2, 3, 255, 256, 305, 1_023, MAX_ATTEMPT_DETAIL] {
                    let cut = text_prefix(text.as_bytes(), most);
                    assert!(!cut.contains('\u{FFFD}'), "{ch:?} at {most}: {cut:?}");
                    assert!(text.starts_with(&cut), "{ch:?} at {most}: a prefix");
                    assert!(
                        cut.len() <= most && cut.len() + ch.len() > most,
                        "{ch:?} at {most}"
                    );
                }
            }
        }
        // Short text is kept whole; bytes that are not UTF-8 show as
        // U+FFFD, within the bound.
        assert_eq!(text_prefix(b"ok", 1_024), "ok");
        let bad = text_prefix(&[0xFF; 600], 1_024);
        assert!(bad.len() <= 1_024 && bad.chars().all(|c| c == '\u{FFFD}'));
    }

    /// Every outcome reads back from its stored name; an unknown name is
    /// an error, not a guess.
    #[test]
    fn outcomes_read_back_from_their_names() {
        for outcome in [
            AttemptOutcome::Running,
            AttemptOutcome::Done,
            AttemptOutcome::Failed,
            AttemptOutcome::Dead,
            AttemptOutcome::Interrupted,
            AttemptOutcome::Expired,
        ] {
            assert_eq!(outcome.as_str().parse::<AttemptOutcome>().unwrap(), outcome);
        }
        assert!("exploded".parse::<AttemptOutcome>().is_err());
        assert_eq!(node_of("node-a/00ff"), "node-a");
        assert_eq!(node_of("a/b/00ff"), "a/b");
        assert_eq!(node_of("plain"), "plain");
    }
}
