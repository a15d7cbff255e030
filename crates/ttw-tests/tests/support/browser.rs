//! A headless Chromium driven over WebDriver (`chromedriver`, from the
//! system's packages, which `.ci/run` installs) through `fantoccini`, and
//! the plain HTTP and child processes the browser tests need beside it.

#![allow(dead_code)]

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};
use tokio::runtime::Handle;

/// One HTTP request (`GET` with no body, or `POST` with `body` as JSON) on
/// the runtime `rt`: (status, body).
pub fn http(rt: &Handle, method: &str, url: &str, body: Option<&Value>) -> (u16, String) {
    rt.block_on(async {
        let client = reqwest::Client::new();
        let request = match (method, body) {
            ("GET", None) => client.get(url),
            ("POST", body) => client
                .post(url)
                .header("content-type", "application/json")
                .body(body.map_or_else(String::new, Value::to_string)),
            other => panic!("no such request in this test: {other:?}"),
        };
        let response = request.send().await.expect("the request is answered");
        let status = response.status().as_u16();
        (status, response.text().await.expect("a body"))
    })
}

/// A child process killed when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A WebDriver session on headless Chromium, driven through `fantoccini`
/// on the runtime `rt`.
pub struct Browser {
    rt: Handle,
    client: Option<fantoccini::Client>,
    _driver: Killed,
    profile: std::path::PathBuf,
}

impl Browser {
    pub fn start(rt: &Handle) -> Browser {
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
                && http(rt, "GET", &format!("{root}/status"), None).0 == 200
        });
        let profile =
            std::env::temp_dir().join(format!("ttw_chromium_{}_{port}", std::process::id()));
        let caps = json!({
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
        });
        let Value::Object(caps) = caps else {
            unreachable!("an object")
        };
        let client = rt
            .block_on(
                ClientBuilder::new(HttpConnector::new())
                    .capabilities(caps)
                    .connect(&root),
            )
            .expect("a new WebDriver session");
        Browser {
            rt: rt.clone(),
            client: Some(client),
            _driver: driver,
            profile,
        }
    }

    pub fn client(&self) -> &fantoccini::Client {
        self.client.as_ref().expect("the session is open")
    }

    pub fn go(&self, url: &str) {
        self.rt.block_on(self.client().goto(url)).unwrap();
    }

    /// Runs `script` (a function body) in the page and returns its value.
    pub fn eval(&self, script: &str) -> Value {
        self.rt
            .block_on(self.client().execute(script, Vec::new()))
            .unwrap()
    }

    pub fn click(&self, css: &str) {
        self.rt
            .block_on(async { self.client().find(Locator::Css(css)).await?.click().await })
            .unwrap();
    }

    pub fn type_into(&self, css: &str, text: &str) {
        self.rt
            .block_on(async {
                self.client()
                    .find(Locator::Css(css))
                    .await?
                    .send_keys(text)
                    .await
            })
            .unwrap();
    }

    /// The page as PNG.
    pub fn screenshot(&self) -> Vec<u8> {
        self.rt.block_on(self.client().screenshot()).unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.rt.block_on(client.close());
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

pub fn wait_until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
