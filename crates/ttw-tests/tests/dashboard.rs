//! The dashboard of `ttw serve`, loaded in a real headless Chromium driven
//! over WebDriver (`chromedriver`, from the system's packages; `.ci/run`
//! installs both; the `fantoccini` client, and `reqwest` for plain HTTP): the page renders the counts, a `<script>` in a payload
//! or an error shows as text and never runs, and a redrive without the
//! token is refused while one with it succeeds.
//!
//! With `TTW_SCREENSHOT=PATH` the test also saves a screenshot of the page
//! there (`docs/dashboard.png` was made so).

#[path = "support/backends.rs"]
mod backends;
#[path = "support/browser.rs"]
mod browser;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use backends::{Backend, Db};
use browser::{http, wait_until, Browser, Killed};
use serde_json::json;
use ttw_durable::{Scheduler, Store, TaskId, TaskState};

/// A payload and an error that would run script if the page put them in
/// as HTML.
const EVIL_PAYLOAD: &str =
    r#"<img src=x onerror="window.__pwned='img'"><script>window.__pwned='script'</script>"#;
const EVIL_ERROR: &str = r#"<b>boom</b><script>window.__pwned='error'</script>"#;
const TOKEN: &str = "dashboard-test-token";

/// Starts `ttw serve` on `db` on a free loopback port; returns the process
/// and the page's address.
fn serve(db: &Db) -> (Killed, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ttw-under-test"))
        .args(db.cli_args())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token",
            TOKEN,
            "--refresh",
            "300ms",
        ])
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("ttw serve runs");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().expect("ttw serve prints its address").unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();
    // Keep reading what it prints, so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (Killed(child), url)
}

/// Starts `ttw server` on `db` with a `[dashboard]` on a free loopback
/// port (and no scheduler: the test's own node is the one the page shows);
/// returns the process and the dashboard's address.
fn server(db: &Db) -> (Killed, String) {
    let args = db.cli_args();
    let database = &args[1];
    let dir = std::env::temp_dir().join(format!("ttw_dashboard_server_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("ttw.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:0"
database = "{database}"

[scheduler]
enabled = false

[dashboard]
listen = "127.0.0.1:0"
token_env = "TTW_DASHBOARD_TOKEN"
refresh = "300ms"

[[queues]]
name = "emails"

[[queues]]
name = "reports"

[[tokens]]
name = "app"
secret_env = "TTW_TOKEN_APP"
scopes = ["read"]
"#
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ttw-under-test"))
        .args(["server", "--config"])
        .arg(&config)
        .env("TTW_DASHBOARD_TOKEN", TOKEN)
        .env("TTW_TOKEN_APP", "app-token-0123456789")
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("ttw server runs");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("ttw server prints its dashboard's address")
            .unwrap();
        if let Some(rest) = line.strip_prefix("ttw server: dashboard on ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Killed(child), url)
}

#[test]
#[cfg_attr(
    ttw_no_browser,
    ignore = "needs chromedriver and chromium (apt-get install chromium chromium-driver); .ci/run installs them"
)]
fn the_dashboard_in_a_real_browser() {
    the_dashboard_of(serve, "dashboard");
}

/// The same page, served by `ttw server` beside its API.
#[test]
#[cfg_attr(
    ttw_no_browser,
    ignore = "needs chromedriver and chromium (apt-get install chromium chromium-driver); .ci/run installs them"
)]
fn the_dashboard_of_ttw_server_in_a_real_browser() {
    the_dashboard_of(server, "dashboard_server");
}

/// Fills a store, starts the dashboard with `launch`, and drives the page.
fn the_dashboard_of(launch: fn(&Db) -> (Killed, String), name: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = Db::new(Backend::Sqlite, name);
    let store: Store = rt.block_on(db.open());
    // A node serving "default" only, so the other queues' tasks wait and
    // the page has a node to show.
    let node = rt.block_on(async {
        Scheduler::builder(store.clone())
            .node_id("worker-1")
            .start(|_task| async { Ok::<_, String>(()) })
            .await
            .unwrap()
    });
    let dead = rt.block_on(async {
        for i in 0..12u64 {
            store
                .schedule(format!("{{\"to\":\"user{i}@example.com\"}}"))
                .queue("emails")
                .delay(Duration::from_secs(60 + i * 290))
                .await
                .unwrap();
        }
        for i in 0..3u64 {
            store.schedule(format!("report {i}")).queue("reports").delay(Duration::from_secs(600 * (i + 1))).await.unwrap();
        }
        // Flow control on the emails queue, shown beside its counts.
        store
            .set_queue_limits("emails", ttw_durable::QueueLimits::new().concurrency(8).rate(ttw_durable::Rate::per_second(100).burst(10)))
            .await
            .unwrap();
        let dead = store.schedule(EVIL_PAYLOAD).queue("emails").delay(Duration::from_secs(3600 * 5)).await.unwrap();
        let other = store.schedule("{\"to\":\"ops@example.com\"}").queue("emails").delay(Duration::from_secs(3600 * 5)).await.unwrap();
        for (id, error) in [(dead, EVIL_ERROR), (other, "SMTP 421: try again later")] {
            db.exec(&format!(
                "UPDATE ttw_tasks SET state = 'dead', attempts = 5, last_error = '{}' WHERE id = {}",
                error.replace('\'', "''"),
                id
            ))
            .await;
        }
        dead
    });
    let state = |id: TaskId| rt.block_on(store.get(id)).unwrap().unwrap().state;

    let (_server, url) = launch(&db);
    let browser = Browser::start(rt.handle());
    browser.go(&url);
    wait_until(
        Duration::from_secs(30),
        "the page to render the store",
        || {
            browser
                .eval("return Number(document.body.dataset.loaded || 0);")
                .as_u64()
                .unwrap_or(0)
                >= 1
        },
    );

    // The flow control, as the page shows it.
    let flow = browser.eval(
        "return [...document.querySelectorAll('#counts tbody tr')].map(r => r.cells[7].textContent);",
    );
    assert_eq!(
        flow,
        json!(["8 at once · 100/1s (burst 10)", "-"]),
        "the flow control column"
    );
    // The counts, as the page shows them.
    let counts = browser.eval(
        "return [...document.querySelectorAll('#counts tbody tr')].map(r => [...r.cells].slice(0, 6).map(c => c.textContent));",
    );
    assert_eq!(
        counts,
        json!([
            ["emails", "12", "0", "0", "2", "0"],
            ["reports", "3", "0", "0", "0", "0"]
        ]),
        "the counts table"
    );
    let timeline = browser.eval("return [...document.querySelectorAll('#timeline div')].map(d => Number(d.title)).reduce((a, b) => a + b, 0);");
    assert_eq!(
        timeline,
        json!(15),
        "every task due within the hour is on the timeline (12 emails, 3 reports)"
    );
    let nodes = browser.eval("return [...document.querySelectorAll('#nodes tbody tr')].map(r => r.cells[0].textContent);");
    assert_eq!(nodes, json!(["worker-1"]));

    // The payload and the error show as text; neither ran.
    assert_eq!(
        browser.eval("return typeof window.__pwned;"),
        json!("undefined"),
        "a payload's script ran"
    );
    let shown = browser.eval(&format!(
        "const r = [...document.querySelectorAll('#dead tbody tr')].find(r => r.cells[0].textContent === '{}'); return [r.cells[3].textContent, r.cells[4].textContent];",
        dead.get()
    ));
    assert_eq!(shown, json!([EVIL_ERROR, EVIL_PAYLOAD]));
    assert_eq!(
        browser
            .eval("return document.querySelectorAll('#dead img, #dead script, #dead b').length;"),
        json!(0)
    );

    if let Ok(path) = std::env::var("TTW_SCREENSHOT") {
        std::fs::write(&path, browser.screenshot()).unwrap();
    }

    // Redrive without the token: refused, and the task stays dead.
    let button = format!("#dead button.redrive[data-task='{}']", dead.get());
    browser.click(&button);
    wait_until(Duration::from_secs(15), "the refusal", || {
        browser
            .eval("return document.getElementById('message').textContent;")
            .as_str()
            .unwrap_or("")
            .contains("refused")
    });
    assert_eq!(state(dead), TaskState::Dead);

    // With the token typed in: redriven.
    browser.type_into("#token", TOKEN);
    browser.click(&button);
    wait_until(Duration::from_secs(15), "the redrive", || {
        browser
            .eval("return document.getElementById('message').textContent;")
            .as_str()
            .unwrap_or("")
            .ends_with(": done")
    });
    assert_eq!(state(dead), TaskState::Scheduled);
    assert_eq!(
        browser.eval("return typeof window.__pwned;"),
        json!("undefined")
    );

    // And /metrics answers for Prometheus, with the task counts.
    let (status, metrics) = http(rt.handle(), "GET", &format!("{url}metrics"), None);
    assert_eq!(status, 200);
    assert!(metrics.contains("ttw_tasks{"), "{metrics}");
    rt.block_on(node.shutdown()).unwrap();
}
