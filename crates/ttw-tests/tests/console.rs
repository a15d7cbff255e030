//! The console of `ttw server` (`/console/`), in a real headless Chromium,
//! gone through as an operator would, against a real server (a child
//! process on SQLite, its scheduler on) delivering to a real webhook
//! receiver (`receiver.py`):
//!
//! - a wrong token is shown nothing; a read-only token is shown no action;
//! - find a dead task by its idempotency key, open it, read its error in
//!   its attempts and its JSON payload as a tree, redrive it (once the
//!   destination is back), and see it done;
//! - filter by partition key, and cancel what the filter selects, the
//!   confirmation saying how many;
//! - pause a queue and see a due task wait, resume it and see it delivered;
//! - change a queue's rate in place;
//! - see a pull queue's workers, and a held task's worker and lease;
//! - a recurring schedule's next occurrences, and its pause;
//! - the nodes, and the charts of throughput and lateness.
//!
//! A screenshot of each page is kept in `$CARGO_TARGET_TMPDIR/console/`
//! (under `target/tmp`), the test's artifacts.

#[path = "support/browser.rs"]
mod browser;
#[path = "support/receiver.rs"]
mod receiver;
#[path = "support/ttw_server.rs"]
mod ttw_server;

use std::time::Duration;

use browser::{wait_until, Browser};
use receiver::{Receiver, SECRET};
use serde_json::{json, Value};
use tokio::runtime::Handle;

const OPS: &str = "console-ops-token-0123456789";
const VIEWER: &str = "console-viewer-token-0123456789";

/// `method path` on the server at `base` with `token` and `body`:
/// (status, JSON answer).
fn call(rt: &Handle, method: &str, url: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    rt.block_on(async {
        let client = reqwest::Client::new();
        let mut request = client
            .request(method.parse().unwrap(), url)
            .bearer_auth(token);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    })
}

/// The text of the first element `css` selects, or `None`.
fn text(b: &Browser, css: &str) -> Option<String> {
    let script = format!(
        "const e = document.querySelector({}); return e ? e.textContent : null;",
        json!(css)
    );
    b.eval(&script).as_str().map(str::to_string)
}

/// How many elements `css` selects.
fn count(b: &Browser, css: &str) -> u64 {
    b.eval(&format!(
        "return document.querySelectorAll({}).length;",
        json!(css)
    ))
    .as_u64()
    .unwrap()
}

/// How many times the console has drawn a page.
fn drawn(b: &Browser) -> u64 {
    b.eval("return Number(document.body.dataset.loaded);")
        .as_u64()
        .unwrap()
}

/// Runs `step` (a click, a submit) and waits until the console has drawn
/// the page `page` after it.
fn then_page(b: &Browser, page: &str, step: impl FnOnce()) {
    let before = drawn(b);
    step();
    wait_until(Duration::from_secs(20), &format!("the {page} page"), || {
        drawn(b) > before && b.eval("return document.body.dataset.page;").as_str() == Some(page)
    });
}

/// Confirms the question the console asks, after checking its text.
fn confirm(b: &Browser, question: &str) {
    wait_until(Duration::from_secs(20), "the confirmation", || {
        b.eval("return !document.getElementById('confirm').hidden;") == json!(true)
    });
    assert_eq!(text(b, "#confirm-text").as_deref(), Some(question));
    let page = b.eval("return document.body.dataset.page;");
    then_page(b, page.as_str().unwrap(), || b.click("#confirm-yes"));
}

fn use_token(b: &Browser, token: &str) {
    b.eval("document.getElementById('token').value = ''; return null;");
    b.type_into("#token", token);
    b.click("#use-token");
}

/// Saves a screenshot of the page as `name`.png among the artifacts.
fn keep(b: &Browser, name: &str) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), b.screenshot()).unwrap();
}

/// The state of task `id`, by the API.
fn state_of(rt: &Handle, base: &str, id: i64) -> String {
    let (_, task) = call(rt, "GET", &format!("{base}/v1/tasks/{id}"), OPS, None);
    task["state"].as_str().unwrap_or("?").to_string()
}

#[test]
#[cfg_attr(
    ttw_no_browser,
    ignore = "needs chromedriver and chromium (apt-get install chromium chromium-driver); .ci/run installs them"
)]
fn an_operator_goes_through_every_page_of_the_console() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rt = runtime.handle().clone();
    let receiver = rt.block_on(Receiver::start());
    // The destination of the task that dies: down first, back later.
    let mut down = rt.block_on(Receiver::start());
    rt.block_on(down.kill());
    let down_url = down.url("/dest/orders/");
    let dir = std::env::temp_dir().join(format!("ttw_console_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let database = format!("database = \"{}\"", dir.join("tasks.db").display());
    let config = ttw_server::write_config(
        &dir,
        &database,
        &format!(
            r#"[scheduler]
heartbeat = "500ms"

[console]
stats_every = "1s"

[[queues]]
name = "orders"
webhook = {{ url = "{hook}", secret_env = "TTW_SECRET" }}

[[queues]]
name = "thumbs"
pull = true

[[tokens]]
name = "ops"
secret_env = "TTW_OPS"
scopes = ["admin"]
destinations = ["http://127.0.0.1:{port}/dest/"]

[[tokens]]
name = "viewer"
secret_env = "TTW_VIEWER"
scopes = ["read"]
"#,
            hook = receiver.url("/hook"),
            port = down.port,
        ),
    );
    let (_server, addr) = rt.block_on(ttw_server::start(
        &config,
        &[
            ("TTW_SECRET", SECRET),
            ("TTW_OPS", OPS),
            ("TTW_VIEWER", VIEWER),
        ],
    ));
    let base = format!("http://{addr}");

    // What the operator will look for.
    let (status, dead) = call(
        &rt,
        "POST",
        &format!("{base}/v1/tasks"),
        OPS,
        Some(json!({
            "queue": "orders", "idempotency_key": "order-42-receipt", "max_attempts": 1,
            "payload": {"order": {"id": 42, "items": [1, 2]}, "note": "<b>not html</b>"},
            "target": {"url": down_url},
        })),
    );
    assert_eq!(status, 201, "{dead}");
    let dead_id = dead["id"].as_i64().unwrap();
    for (i, tenant) in ["tenant-a", "tenant-a", "tenant-a", "tenant-b", "tenant-b"]
        .iter()
        .enumerate()
    {
        let (status, answer) = call(
            &rt,
            "POST",
            &format!("{base}/v1/tasks"),
            OPS,
            Some(json!({
                "queue": "orders", "delay": "1h", "partition_key": tenant, "payload": {"n": i},
            })),
        );
        assert_eq!(status, 201, "{answer}");
    }
    let (status, answer) = call(
        &rt,
        "POST",
        &format!("{base}/v1/tasks"),
        OPS,
        Some(json!({
            "queue": "orders", "delay": "1h", "payload_base64": "AAEC/w==", "idempotency_key": "bytes",
        })),
    );
    assert_eq!(status, 201, "{answer}");
    let bytes_id = answer["id"].as_i64().unwrap();
    let (status, answer) = call(
        &rt,
        "PUT",
        &format!("{base}/v1/recurring/nightly"),
        OPS,
        Some(json!({
            "cron": "0 3 * * *", "time_zone": "Europe/Paris", "queue": "orders", "payload": {"report": "daily"},
        })),
    );
    assert!(status < 300, "{answer}");
    wait_until(Duration::from_secs(30), "the task to die", || {
        state_of(&rt, &base, dead_id) == "dead"
    });

    let b = Browser::start(&rt);
    b.go(&format!("{base}/console/"));

    // A wrong token is shown nothing.
    use_token(&b, "not-a-token-at-all");
    wait_until(Duration::from_secs(20), "the refusal", || {
        b.eval("return document.body.dataset.page;").as_str() == Some("refused")
    });
    assert!(text(&b, "#message").unwrap().contains("unauthorized"));
    assert_eq!(count(&b, "#tasks"), 0);

    // A read-only token sees tasks, and no action.
    then_page(&b, "tasks", || use_token(&b, VIEWER));
    assert_eq!(count(&b, "#tasks tbody tr"), 7);
    assert_eq!(count(&b, "#bulk-cancel"), 0);
    then_page(&b, "task", || {
        b.go(&format!("{base}/console/#/task/{bytes_id}"))
    });
    assert_eq!(count(&b, "#actions button"), 0);
    // Bytes are shown as hex and base64.
    assert_eq!(text(&b, "#payload-hex").as_deref(), Some("00 01 02 ff"));
    assert_eq!(text(&b, "#payload-base64").as_deref(), Some("AAEC/w=="));
    keep(&b, "task-bytes");

    // The operator, with the admin token, finds the dead task by its key.
    then_page(&b, "tasks", || b.go(&format!("{base}/console/#/tasks")));
    then_page(&b, "tasks", || use_token(&b, OPS));
    then_page(&b, "task", || {
        b.type_into("#search", "order-42-receipt");
        b.click("#go");
    });
    assert_eq!(text(&b, "#f-id").unwrap(), dead_id.to_string());
    assert_eq!(text(&b, "#f-state").as_deref(), Some("dead"));
    let error = text(&b, "#f-last_error").unwrap();
    assert!(
        error.contains("connect") || error.contains("refused"),
        "{error}"
    );
    // Its attempt, with the same error; its payload as a tree, as text.
    assert_eq!(count(&b, "#attempts tbody tr"), 1);
    assert_eq!(
        text(&b, "#attempts tbody tr td:nth-child(2)").as_deref(),
        Some("dead")
    );
    assert!(text(&b, "#payload")
        .unwrap()
        .contains("\"<b>not html</b>\""));
    assert_eq!(
        count(&b, "#payload ul.tree details"),
        2,
        "order and its items open and close"
    );
    assert_eq!(count(&b, "#payload b"), 0, "a payload is text, never HTML");
    keep(&b, "task-dead");
    // Its destination is back; the redrive delivers it.
    let back = rt.block_on(down.restart());
    b.click("#act-redrive");
    confirm(
        &b,
        &format!("Redrive task {dead_id} (due now, attempts reset)?"),
    );
    wait_until(
        Duration::from_secs(30),
        "the redriven task to be done",
        || state_of(&rt, &base, dead_id) == "done",
    );
    b.eval("location.reload(); return null;");
    wait_until(Duration::from_secs(20), "the page to show it done", || {
        text(&b, "#f-state").as_deref() == Some("done")
    });
    assert_eq!(
        count(&b, "#attempts tbody tr"),
        2,
        "the failure and the success"
    );
    assert!(back.accepted().iter().any(|r| r["path"] == "/dest/orders/"));
    keep(&b, "task-done");

    // Filter by partition key; cancel what it selects.
    then_page(&b, "tasks", || b.go(&format!("{base}/console/#/tasks")));
    then_page(&b, "tasks", || {
        b.type_into("#filters input[name=partition_key]", "tenant-a");
        b.click("#apply");
    });
    assert_eq!(count(&b, "#tasks tbody tr"), 3);
    keep(&b, "tasks-filtered");
    b.click("#bulk-cancel");
    confirm(&b, "Cancel 3 tasks?");
    assert!(text(&b, "#message").unwrap().contains("\"cancelled\":3"));
    assert_eq!(count(&b, "#tasks tbody tr td.state-cancelled"), 3);
    let (_, tenant_b) = call(
        &rt,
        "GET",
        &format!("{base}/v1/tasks?partition_key=tenant-b&state=scheduled"),
        OPS,
        None,
    );
    assert_eq!(
        tenant_b["tasks"].as_array().unwrap().len(),
        2,
        "the other key's tasks stay"
    );

    // A due range typed in picks due order; the page comes in that order.
    then_page(&b, "tasks", || b.go(&format!("{base}/console/#/tasks")));
    then_page(&b, "tasks", || {
        b.type_into("#filters input[name=due_from]", "2000-01-01T00:00:00Z");
        let order = b.eval("return document.querySelector('#filters select[name=order]').value;");
        assert_eq!(order, "due", "a due range picks due order");
        b.click("#apply");
    });
    let hash = b.eval("return location.hash;");
    assert!(hash.as_str().unwrap().contains("order=due"), "{hash}");
    assert!(count(&b, "#tasks tbody tr") > 1);
    let due = b.eval(
        "return [...document.querySelectorAll('#tasks tbody tr')].map((r) => r.querySelector('td.due').textContent);",
    );
    let due: Vec<String> = serde_json::from_value(due).unwrap();
    assert!(due.windows(2).all(|w| w[0] <= w[1]), "{due:?}");

    // Pause a queue: a task due now waits; resume it: delivered.
    then_page(&b, "queues", || b.go(&format!("{base}/console/#/queues")));
    b.click("tr[data-queue=orders] button.pause");
    confirm(
        &b,
        "Pause queue orders? No node starts its tasks until it is resumed.",
    );
    assert_eq!(
        text(&b, "tr[data-queue=orders] td:nth-child(2)").as_deref(),
        Some("paused")
    );
    let (_, due) = call(
        &rt,
        "POST",
        &format!("{base}/v1/tasks"),
        OPS,
        Some(json!({
            "queue": "orders", "payload": {"while": "paused"},
        })),
    );
    let due_id = due["id"].as_i64().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        state_of(&rt, &base, due_id),
        "scheduled",
        "no delivery while paused"
    );
    assert!(!receiver
        .requests()
        .iter()
        .any(|r| r["body"].as_str().is_some_and(|b| b.contains("paused"))));
    keep(&b, "queues-paused");
    b.click("tr[data-queue=orders] button.resume");
    confirm(&b, "Resume queue orders?");
    wait_until(
        Duration::from_secs(30),
        "the delivery after the resume",
        || state_of(&rt, &base, due_id) == "done",
    );
    // Orders' tasks done in the last minute: a throughput, shown.
    let (_, counts) = call(&rt, "GET", &format!("{base}/v1/counts"), OPS, None);
    let rate = counts["queues"]["orders"]["done_per_s"].as_f64().unwrap();
    assert!(rate > 0.0, "{counts}");
    then_page(&b, "queues", || {
        b.go(&format!("{base}/console/#/queues?again"))
    });
    let shown = text(&b, "tr[data-queue=orders] td.done-per-s").unwrap();
    assert!(shown.parse::<f64>().unwrap() > 0.0, "{shown}");

    // Change the rate in place.
    b.click("tr[data-queue=orders] button.edit-limits");
    b.type_into("form.limits input[name=rate_count]", "5");
    b.type_into("form.limits input[name=rate_per]", "1s");
    b.click("form.limits button.save-limits");
    wait_until(Duration::from_secs(20), "the confirmation", || {
        b.eval("return !document.getElementById('confirm').hidden;") == json!(true)
    });
    then_page(&b, "queues", || b.click("#confirm-yes"));
    let (_, queue) = call(
        &rt,
        "GET",
        &format!("{base}/v1/queues/orders"),
        VIEWER,
        None,
    );
    assert_eq!(queue["rate"]["count"], 5, "{queue}");
    assert_eq!(queue["rate"]["period_ms"], 1000, "{queue}");
    assert!(text(&b, "tr[data-queue=orders] td.rate")
        .unwrap()
        .starts_with("5 per 1 s"));
    keep(&b, "queues");

    // A pull queue: its workers, with what each holds; a held task shows
    // its worker and lease.
    let new = json!({"queue": "thumbs", "delay": "0s", "payload": {"image": 1}});
    let (_, made) = call(&rt, "POST", &format!("{base}/v1/tasks"), OPS, Some(new));
    let held_id = made["id"].as_i64().unwrap();
    let claim = json!({"worker": "w-1", "wait": "10s", "lease": "5m"});
    let url = format!("{base}/v1/queues/thumbs/claim");
    let (status, claimed) = call(&rt, "POST", &url, OPS, Some(claim));
    let held = &claimed["tasks"][0];
    assert_eq!(
        (status, held["id"].as_i64()),
        (200, Some(held_id)),
        "{claimed}"
    );
    then_page(&b, "queues", || {
        b.go(&format!("{base}/console/#/queues?workers"))
    });
    let holds = "section.workers[data-queue=thumbs] tr[data-worker=w-1] td:nth-child(3)";
    assert_eq!(text(&b, holds).as_deref(), Some("1"));
    keep(&b, "workers");
    then_page(&b, "task", || {
        b.go(&format!("{base}/console/#/task/{held_id}"))
    });
    assert_eq!(text(&b, "#f-worker").as_deref(), Some("w-1"));
    assert_eq!(
        text(&b, "#f-lease_until").as_deref(),
        held["lease_until"].as_str()
    );

    // Recurring: its next occurrences; pause it.
    then_page(&b, "recurring", || {
        b.go(&format!("{base}/console/#/recurring"))
    });
    assert_eq!(count(&b, "tr[data-name=nightly] td:nth-child(6) div"), 5);
    keep(&b, "recurring");
    b.click("tr[data-name=nightly] button.pause");
    confirm(&b, "Pause nightly?");
    let (_, list) = call(&rt, "GET", &format!("{base}/v1/recurring"), VIEWER, None);
    assert_eq!(list["recurring"][0]["paused"], true, "{list}");

    // Nodes: this server's node holds the shards.
    then_page(&b, "nodes", || b.go(&format!("{base}/console/#/nodes")));
    assert_eq!(count(&b, "#nodes tbody tr"), 1);
    assert_eq!(
        text(&b, "#nodes td.takeovers").as_deref(),
        Some("0"),
        "the one node took over none"
    );
    assert_eq!(
        text(&b, "#nodes tbody tr td:nth-child(7)").as_deref(),
        Some("live")
    );
    keep(&b, "nodes");

    // Charts: drawn from this node's samples, once a second here.
    wait_until(Duration::from_secs(30), "points with deliveries", || {
        let (_, stats) = call(&rt, "GET", &format!("{base}/v1/stats"), VIEWER, None);
        stats["points"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["started"].as_u64() > Some(0)))
    });
    then_page(&b, "charts", || b.go(&format!("{base}/console/#/charts")));
    let line = b.eval("return document.querySelector('#throughput polyline.series-done_per_s').getAttribute('points');");
    assert!(line.as_str().unwrap().split(' ').count() >= 2, "{line}");
    assert_eq!(count(&b, "#lateness polyline.series-lateness_p99_ms"), 1);
    keep(&b, "charts");
}
