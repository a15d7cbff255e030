//! The dashboard of `ttw serve`, loaded in a real headless Chromium driven
//! over WebDriver (`chromedriver`, from the system's packages; `.ci/run`
//! installs both): the page renders the counts, a `<script>` in a payload
//! or an error shows as text and never runs, and a redrive without the
//! token is refused while one with it succeeds.
//!
//! With `TTW_SCREENSHOT=PATH` the test also saves a screenshot of the page
//! there (`docs/dashboard.png` was made so).

#[path = "support/backends.rs"]
mod backends;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use backends::{Backend, Db};
use base64::Engine as _;
use serde_json::{json, Value};
use ttw_durable::{Scheduler, Store, TaskId, TaskState};

/// A payload and an error that would run script if the page put them in
/// as HTML.
const EVIL_PAYLOAD: &str =
    r#"<img src=x onerror="window.__pwned='img'"><script>window.__pwned='script'</script>"#;
const EVIL_ERROR: &str = r#"<b>boom</b><script>window.__pwned='error'</script>"#;
const TOKEN: &str = "dashboard-test-token";

/// One HTTP/1.1 request on a fresh connection: (status, body).
fn http(method: &str, url: &str, body: Option<&Value>) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let mut stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("connect {host}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // Read the head, then as much body as it announces (a server may keep
    // the connection open despite `Connection: close`).
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "{method} {url}: connection closed before the head ended"
        );
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let length: Option<usize> = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok());
    let chunked = head.contains("transfer-encoding: chunked");
    loop {
        let have = raw.len() - head_end;
        let done = match length {
            Some(len) => have >= len,
            None if chunked => raw.ends_with(b"0\r\n\r\n"),
            None => false,
        };
        if done {
            break;
        }
        let n = stream.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let body = String::from_utf8_lossy(&raw[head_end..]).into_owned();
    let body = if chunked { dechunk(&body) } else { body };
    (status, body)
}

/// The body of a chunked response.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A WebDriver session on headless Chromium.
struct Browser {
    base: String,
    _driver: Killed,
    _profile: std::path::PathBuf,
}

impl Browser {
    fn start() -> Browser {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs (Debian: apt-get install chromium chromium-driver)");
        let driver = Killed(driver);
        let root = format!("http://127.0.0.1:{port}");
        wait_until(Duration::from_secs(30), "chromedriver to answer", || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
                && http("GET", &format!("{root}/status"), None).0 == 200
        });
        let profile =
            std::env::temp_dir().join(format!("ttw_chromium_{}_{port}", std::process::id()));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--window-size=1280,1500",
                    format!("--user-data-dir={}", profile.display()),
                ]
            }
        }}});
        let (status, body) = http("POST", &format!("{root}/session"), Some(&caps));
        assert_eq!(status, 200, "new session: {body}");
        let session: Value = serde_json::from_str(&body).unwrap();
        let id = session["value"]["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        Browser {
            base: format!("{root}/session/{id}"),
            _driver: driver,
            _profile: profile,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, text) = http(method, &format!("{}{path}", self.base), body.as_ref());
        assert_eq!(status, 200, "{method} {path}: {text}");
        serde_json::from_str::<Value>(&text).unwrap()["value"].clone()
    }

    fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body) in the page and returns its value.
    fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
    }

    fn element(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            "/element",
            Some(json!({ "using": "css selector", "value": css })),
        );
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .expect("an element reference")
            .to_string()
    }

    fn click(&self, css: &str) {
        let el = self.element(css);
        self.call("POST", &format!("/element/{el}/click"), Some(json!({})));
    }

    fn type_into(&self, css: &str, text: &str) {
        let el = self.element(css);
        self.call(
            "POST",
            &format!("/element/{el}/value"),
            Some(json!({ "text": text })),
        );
    }

    fn screenshot(&self) -> Vec<u8> {
        let b64 = self.call("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = http("DELETE", &self.base, None);
        let _ = std::fs::remove_dir_all(&self._profile);
    }
}

fn wait_until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

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

#[test]
#[cfg_attr(
    ttw_no_browser,
    ignore = "needs chromedriver and chromium (apt-get install chromium chromium-driver); .ci/run installs them"
)]
fn the_dashboard_in_a_real_browser() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = Db::new(Backend::Sqlite, "dashboard");
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

    let (_server, url) = serve(&db);
    let browser = Browser::start();
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
    let (status, metrics) = http("GET", &format!("{url}metrics"), None);
    assert_eq!(status, 200);
    assert!(metrics.contains("ttw_tasks{"), "{metrics}");
    rt.block_on(node.shutdown()).unwrap();
}
