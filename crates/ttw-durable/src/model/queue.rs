//! Queues: the rule for a queue's name. A node's lanes (its queues crossed
//! with the shards) are the node's: see `node/lanes.rs`.

use crate::error::Error;

/// The queue of a task scheduled without one.
pub const DEFAULT_QUEUE: &str = "default";

/// The longest queue name, in bytes.
pub const MAX_QUEUE_NAME: usize = 64;

/// Checks a queue name: 1 to [`MAX_QUEUE_NAME`] bytes of ASCII letters,
/// digits, `_`, `-`, `.` and `:` (a node lists its queues separated by
/// commas, so a name holds none).
pub(crate) fn check_queue(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid_queue("it is empty"));
    }
    if name.len() > MAX_QUEUE_NAME {
        return Err(Error::invalid_queue(format!(
            "'{}…' is {} bytes, over the limit of {MAX_QUEUE_NAME}",
            name.chars().take(16).collect::<String>(),
            name.len()
        )));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')))
    {
        return Err(Error::invalid_queue(format!(
            "'{name}' holds {bad:?}; use ASCII letters, digits, '_', '-', '.' and ':'"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_are_checked() {
        for good in [
            "default",
            "emails",
            "a",
            "reports.daily",
            "tenant:42-high_1",
        ] {
            assert!(check_queue(good).is_ok(), "{good}");
        }
        let long = "q".repeat(MAX_QUEUE_NAME + 1);
        for bad in [
            "",
            "a,b",
            "with space",
            "ümlaut",
            "semi;colon",
            long.as_str(),
        ] {
            let err = check_queue(bad).unwrap_err();
            assert!(err.is_invalid_queue(), "{bad}: {err}");
        }
        assert!(check_queue(&"q".repeat(MAX_QUEUE_NAME)).is_ok());
        assert!(check_queue("a,b").unwrap_err().to_string().contains("','"));
    }
}
