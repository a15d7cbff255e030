//! Which operating-system process a session runs in, written beside its
//! membership row, so that a node on the same machine can prove the process
//! gone and take its shards at once instead of waiting out the lease TTL
//! (a restart after a crash, or a sibling process killed).
//!
//! Only Linux gives that proof cheaply and without `unsafe`: an identity is
//! `linux:<boot id>:<pid namespace>:<uid>:<pid>:<start time>`, read from
//! `/proc`. The boot id and the pid namespace make sure a pid is compared
//! only with pids of the same kernel session and namespace (two containers,
//! or two hosts, never judge each other); the user id, that only processes
//! this one may see are judged (`/proc` mounted with `hidepid` hides other
//! users' processes); and the start time, that a pid reused by a newer
//! process does not pass for the old one. A process is gone only when its
//! `/proc` entry is not found, is a zombie, or started at another time; any
//! other answer (no permission, an error) proves nothing. A process whose
//! own `/proc/self` does not show its pid (a `/proc` of another namespace)
//! has no identity. Elsewhere, or where `/proc` cannot be read, a session
//! has no identity and others wait for its TTL as before.

use std::sync::OnceLock;

/// This process's identity, if it has one (see the module docs).
pub(crate) fn identity() -> Option<&'static str> {
    static ME: OnceLock<Option<String>> = OnceLock::new();
    ME.get_or_init(|| {
        let place = place()?;
        let stat = Stat::read("self").ok()?;
        // A /proc of another pid namespace would name other processes.
        if stat.pid != std::process::id() {
            return None;
        }
        Some(format!(
            "{place}:{}:{}",
            std::process::id(),
            stat.start_time
        ))
    })
    .as_deref()
}

/// Whether the process named by `other` (an identity another session wrote)
/// is known to have ended: it ran on this kernel, in this pid namespace, and
/// its pid is gone, a zombie, or now a different process. `false` whenever
/// that cannot be proven.
pub(crate) fn is_gone(other: &str) -> bool {
    let Some(me) = identity() else {
        return false;
    };
    let (Some((my_place, _)), Some((place, rest))) = (split(me), split(other)) else {
        return false;
    };
    if my_place != place {
        return false;
    }
    let Some((pid, start)) = rest.split_once(':') else {
        return false;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    match Stat::read(&pid.to_string()) {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        Ok(stat) => stat.start_time != start || matches!(stat.state, 'Z' | 'X' | 'x'),
    }
}

/// `linux:<boot id>:<pid namespace>:<uid>` for this process.
fn place() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let ns = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let ns = ns.to_str()?;
    let boot = boot.trim();
    if boot.is_empty() || boot.contains(':') || ns.is_empty() {
        return None;
    }
    // "pid:[4026531836]" -> "4026531836"
    let ns = ns.trim_start_matches("pid:[").trim_end_matches(']');
    if ns.contains(':') {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse::<u32>()
        .ok()?;
    Some(format!("linux:{boot}:{ns}:{uid}"))
}

/// Splits an identity into its place and `pid:start`.
fn split(identity: &str) -> Option<(&str, &str)> {
    // linux : boot : ns : uid : pid : start
    let mut cut = identity.match_indices(':').map(|(i, _)| i);
    let fourth = cut.nth(3)?;
    Some((&identity[..fourth], &identity[fourth + 1..]))
}

/// The fields of `/proc/<pid>/stat` this module reads.
struct Stat {
    pid: u32,
    state: char,
    start_time: u64,
}

impl Stat {
    /// `/proc/<pid>/stat`; a file that cannot be parsed is an error of
    /// kind `InvalidData`.
    fn read(pid: &str) -> std::io::Result<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        Self::parse(&text).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidData))
    }

    fn parse(text: &str) -> Option<Stat> {
        let (pid, _) = text.split_once(' ')?;
        // The command name is in parentheses and may hold spaces.
        let rest = text.get(text.rfind(')')? + 2..)?;
        let fields: Vec<&str> = rest.split(' ').collect();
        Some(Stat {
            pid: pid.parse().ok()?,
            state: fields.first()?.chars().next()?,
            // Field 22 of the whole line, the 20th after the name.
            start_time: fields.get(19)?.parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_not_gone_and_a_dead_one_is() {
        let Some(me) = identity() else {
            // Not Linux, or no /proc: nothing can be proven, nothing is.
            assert!(!is_gone("linux:x:y:0:1:1"));
            return;
        };
        assert!(!is_gone(me), "{me}");
        let (place, _) = split(me).unwrap();
        // A child: not gone while it runs; gone once killed and reaped.
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = Stat::read(&pid.to_string()).unwrap().start_time;
        assert!(!is_gone(&format!("{place}:{pid}:{start}")), "a live child");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(is_gone(&format!("{place}:{pid}:{start}")));
        // This process under another start time: a reused pid.
        let stat = Stat::read("self").unwrap();
        let reused = format!("{place}:{}:{}", std::process::id(), stat.start_time + 1);
        assert!(is_gone(&reused));
        // Another machine or namespace is never judged.
        assert!(!is_gone(&format!("linux:other-boot:1:0:{pid}:{start}")));
        // Another user's process is never judged.
        let other_user = place.rsplit_once(':').unwrap().0.to_string() + ":4294967294";
        assert!(!is_gone(&format!("{other_user}:{pid}:{start}")));
        assert!(!is_gone("garbage"));
    }
}
