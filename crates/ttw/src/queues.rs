//! `ttw queue`: the settings every node obeys for a queue (pause, global
//! concurrency, rate), read and changed live.

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use ttw_durable::{Backoff, QueueLimits, QueueSettings, Rate, RetryPolicy, Store};

use crate::error::{fail, Failure, Result};
use crate::output::{self, print_json, queue_settings_json as settings_json, table};
use crate::parse::flag_duration as parse_duration;

/// What `ttw queue` does.
#[derive(Debug, Subcommand)]
pub(crate) enum QueueCommand {
    /// The settings of every queue that has any.
    List,
    /// One queue's settings.
    Show(QueueName),
    /// Stop every node from starting the queue's tasks (in-flight ones
    /// finish); they wait, scheduled, until `resume`.
    Pause(QueueName),
    /// Let the queue's tasks start again.
    Resume(QueueName),
    /// Change the queue's limits across every node; a limit not named is
    /// kept, `none` clears one.
    Limit(LimitArgs),
    /// Change the queue's retry policy over each node's own; a part not
    /// named is kept, `none` clears one.
    Retry(RetryArgs),
}

/// `ttw queue retry`.
#[derive(Debug, Args)]
pub(crate) struct RetryArgs {
    /// The queue's name.
    name: String,
    /// At most this many attempts a task, or `none`.
    #[arg(long, value_name = "N|none")]
    max_attempts: Option<String>,
    /// The backoff before each retry, `BASE..MAX` doubling (`10s..10m`), or
    /// `none`.
    #[arg(long, value_name = "BASE..MAX|none")]
    backoff: Option<String>,
}

/// A queue, by name.
#[derive(Debug, Args)]
pub(crate) struct QueueName {
    /// The queue's name.
    name: String,
}

/// `ttw queue limit`.
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// The queue's name.
    name: String,
    /// At most this many of its tasks running at once across all nodes,
    /// or `none`.
    #[arg(long, value_name = "N|none")]
    concurrency: Option<String>,
    /// At most this many starts a period across all nodes: `100/s`,
    /// `20/500ms`, `1000/1m`, or `none`.
    #[arg(long, value_name = "N/PERIOD|none")]
    rate: Option<String>,
    /// Bursts of up to this many starts (default: the rate's count).
    #[arg(long, value_name = "N")]
    burst: Option<u32>,
    /// At most this many running at once for each partition key, or
    /// `none`.
    #[arg(long, value_name = "N|none")]
    per_key: Option<String>,
}

/// Runs `ttw queue ...`.
pub(crate) async fn queue(store: &Store, command: QueueCommand, json: bool) -> Result<()> {
    match command {
        QueueCommand::List => {
            let all = store.all_queue_settings().await?;
            if json {
                let list: Vec<Value> = all.iter().map(settings_json).collect();
                print_json(&json!({ "queues": list }));
            } else if all.is_empty() {
                println!("no queue has settings: every queue runs unpaused, with no global limit");
            } else {
                let rows: Vec<Vec<String>> = all.iter().map(row).collect();
                print!(
                    "{}",
                    table(
                        &["QUEUE", "PAUSED", "CONCURRENCY", "PER KEY", "RATE", "BURST"],
                        &rows
                    )
                );
            }
            Ok(())
        }
        QueueCommand::Show(q) => show(store, &q.name, json).await,
        QueueCommand::Pause(q) => {
            store.pause_queue(&q.name).await?;
            show(store, &q.name, json).await
        }
        QueueCommand::Resume(q) => {
            store.resume_queue(&q.name).await?;
            show(store, &q.name, json).await
        }
        QueueCommand::Limit(args) => {
            if args.concurrency.is_none()
                && args.rate.is_none()
                && args.burst.is_none()
                && args.per_key.is_none()
            {
                return fail("queue limit: name --concurrency, --rate, --burst or --per-key");
            }
            let now = store.queue_settings(&args.name).await?.limits;
            let concurrency = count_or_none(
                "--concurrency",
                args.concurrency.as_deref(),
                now.concurrency_limit(),
            )?;
            let per_key = count_or_none("--per-key", args.per_key.as_deref(), now.per_key_limit())?;
            let rate = match (args.rate.as_deref(), args.burst) {
                (Some("none"), Some(_)) => return fail("--burst: there is no rate to burst"),
                (Some("none"), None) => None,
                (Some(text), burst) => Some(with_burst(parse_rate(text)?, burst)),
                (None, Some(burst)) => match now.rate_limit() {
                    Some(rate) => Some(rate.burst(burst)),
                    None => return fail("--burst: the queue has no rate; give --rate too"),
                },
                (None, None) => now.rate_limit(),
            };
            let mut limits = QueueLimits::new();
            if let Some(n) = concurrency {
                limits = limits.concurrency(n);
            }
            if let Some(rate) = rate {
                limits = limits.rate(rate);
            }
            if let Some(n) = per_key {
                limits = limits.per_key_concurrency(n);
            }
            store.set_queue_limits(&args.name, limits).await?;
            show(store, &args.name, json).await
        }
        QueueCommand::Retry(args) => {
            if args.max_attempts.is_none() && args.backoff.is_none() {
                return fail("queue retry: name --max-attempts or --backoff");
            }
            let now = store.queue_settings(&args.name).await?.retry;
            let max = count_or_none(
                "--max-attempts",
                args.max_attempts.as_deref(),
                now.max_attempts_limit(),
            )?;
            let backoff = match args.backoff.as_deref() {
                None => now.backoff_policy(),
                Some("none") => None,
                Some(text) => {
                    let (base, most) = text.split_once("..").ok_or_else(|| {
                        Failure(format!(
                            "--backoff: not BASE..MAX: {text:?} (try 10s..10m, or none)"
                        ))
                    })?;
                    Some(Backoff::exponential(
                        parse_duration("--backoff", base)?,
                        parse_duration("--backoff", most)?,
                    ))
                }
            };
            let mut retry = RetryPolicy::new();
            if let Some(n) = max {
                retry = retry.max_attempts(n);
            }
            if let Some(b) = backoff {
                retry = retry.backoff(b);
            }
            store.set_queue_retry(&args.name, retry).await?;
            show(store, &args.name, json).await
        }
    }
}

/// A count given as `N` or `none`; `kept` if not given.
fn count_or_none(flag: &str, given: Option<&str>, kept: Option<u32>) -> Result<Option<u32>> {
    match given {
        None => Ok(kept),
        Some("none") => Ok(None),
        Some(n) => n
            .parse::<u32>()
            .map(Some)
            .map_err(|_| Failure(format!("{flag}: not a count: {n:?} (a number, or none)"))),
    }
}

fn with_burst(rate: Rate, burst: Option<u32>) -> Rate {
    match burst {
        Some(b) => rate.burst(b),
        None => rate,
    }
}

/// A rate as the command line writes it: `COUNT/PERIOD`, the period a
/// duration (`500ms`, `1m`) or a bare unit (`s`, `m`, `h`).
fn parse_rate(text: &str) -> Result<Rate> {
    let bad = || {
        Failure(format!(
            "--rate: not a rate: {text:?} (try 100/s, 20/500ms, 1000/1m, or none)"
        ))
    };
    let (count, per) = text.split_once('/').ok_or_else(bad)?;
    let count: u32 = count.trim().parse().map_err(|_| bad())?;
    let per = per.trim();
    let per = if per.starts_with(|c: char| c.is_ascii_digit()) {
        parse_duration("--rate", per)?
    } else {
        parse_duration("--rate", &format!("1{per}"))?
    };
    Ok(Rate::new(count, per))
}

async fn show(store: &Store, name: &str, json: bool) -> Result<()> {
    let settings = store.queue_settings(name).await?;
    if json {
        print_json(&settings_json(&settings));
    } else {
        print!(
            "{}",
            table(
                &["QUEUE", "PAUSED", "CONCURRENCY", "PER KEY", "RATE", "BURST"],
                &[row(&settings)]
            )
        );
    }
    Ok(())
}

fn row(s: &QueueSettings) -> Vec<String> {
    let rate = s.limits.rate_limit();
    vec![
        s.queue.clone(),
        if s.paused { "yes" } else { "no" }.to_string(),
        s.limits
            .concurrency_limit()
            .map_or("-".to_string(), |n| n.to_string()),
        s.limits
            .per_key_limit()
            .map_or("-".to_string(), |n| n.to_string()),
        rate.map_or("-".to_string(), |r| {
            format!("{}/{}", r.count(), output::span(r.period()))
        }),
        rate.map_or("-".to_string(), |r| r.burst_size().to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rates_are_read_as_written() {
        let secs = Duration::from_secs;
        assert_eq!(parse_rate("100/s").unwrap(), Rate::new(100, secs(1)));
        assert_eq!(
            parse_rate("20/500ms").unwrap(),
            Rate::new(20, Duration::from_millis(500))
        );
        assert_eq!(parse_rate("1000/1m").unwrap(), Rate::new(1000, secs(60)));
        for bad in ["100", "x/s", "100/", "100/fortnight", "-1/s"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
}
