use super::*;

fn counts(pairs: &[(&str, TaskState, u64)]) -> BTreeMap<String, StateCounts> {
    let mut out: BTreeMap<String, StateCounts> = BTreeMap::new();
    for &(queue, state, n) in pairs {
        out.entry(queue.to_string()).or_default().set(state, n);
    }
    out
}

/// A small store: nothing stopped at the bound, so every figure is the
/// bounded count's, exact, and a stale full count is not read.
#[test]
fn exact_counts_are_shown_as_they_are() {
    let mut bounded = BoundedCounts::default();
    bounded.counts = counts(&[("a", TaskState::Scheduled, 3)]);
    let stale = counts(&[
        ("a", TaskState::Scheduled, 900),
        ("gone", TaskState::Done, 5),
    ]);
    let (views, used) = merge(bounded, Some(&stale));
    assert!(!used);
    assert_eq!(views.len(), 1);
    assert_eq!(views["a"].scheduled, 3);
    assert!(views["a"].estimated.is_empty());
}

/// A large store: a count that stopped at the bound takes the full
/// count's figure when it is larger, keeps its own when the full count is
/// older and smaller, and is marked estimated either way; a queue the
/// bounded window did not see comes from the full count.
#[test]
fn stopped_counts_take_the_full_count_when_larger() {
    let mut bounded = BoundedCounts::default();
    bounded.counts = counts(&[
        ("a", TaskState::Scheduled, 10),
        ("a", TaskState::Dead, 2),
        ("b", TaskState::Scheduled, 10),
        ("b", TaskState::Done, 4),
    ]);
    for (queue, state) in [
        ("a", TaskState::Scheduled),
        ("b", TaskState::Scheduled),
        ("a", TaskState::Done),
        ("b", TaskState::Done),
    ] {
        bounded.at_least.insert((queue.to_string(), state));
    }
    let full = counts(&[
        ("a", TaskState::Scheduled, 2_500_000),
        ("b", TaskState::Scheduled, 7),
        ("b", TaskState::Done, 40),
        ("old", TaskState::Done, 12),
    ]);
    let (views, used) = merge(bounded.clone(), Some(&full));
    assert!(used);
    assert_eq!(views["a"].scheduled, 2_500_000);
    assert_eq!(views["a"].dead, 2);
    assert_eq!(views["a"].estimated, ["scheduled", "done"]);
    assert_eq!(views["b"].scheduled, 10);
    assert_eq!(views["b"].done, 40);
    assert_eq!(views["old"].done, 12);
    assert_eq!(views["old"].estimated, ["done", "cancelled"]);

    // Before the first full count: the floors, marked.
    let (views, used) = merge(bounded, None);
    assert!(!used);
    assert_eq!(views["a"].scheduled, 10);
    assert_eq!(views["a"].estimated, ["scheduled", "done"]);
}

/// `GET /v1/counts` over a store: exact and fresh while it is small, the
/// full count started in the background once a count stops at the bound.
#[tokio::test]
async fn a_full_count_runs_once_in_the_background() {
    let store = Store::sqlite_in_memory().await.unwrap();
    store.schedule("x").queue("a").await.unwrap();
    let cache = Arc::new(CountCache::default());
    assert!(cache.last().is_none());
    cache.refresh(&store);
    // A second call while the first runs, or soon after, starts none.
    cache.refresh(&store);
    for _ in 0..200 {
        if cache.last().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first = cache.last().expect("the full count ends");
    assert_eq!(first.counts["a"].scheduled, 1);
    store.schedule("y").queue("a").await.unwrap();
    cache.refresh(&store);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let again = cache.last().unwrap();
    assert_eq!(
        again.taken, first.taken,
        "refreshed within 10 s of the last"
    );
    assert!(!cache.running.load(Ordering::Acquire));
}
