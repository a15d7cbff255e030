//! The clients as a user installs them, from a clean folder, by the
//! commands their READMEs give: the TypeScript client packed by `npm pack`
//! and installed from its tarball into a fresh project, the Python client
//! built as a wheel and installed into a fresh virtual environment; then
//! each README's quick start and worker, run as written against a real
//! `ttw server`.
//!
//! The report this answers: `npm pack` packed two files (`package.json`,
//! `README.md`) and nothing built `dist/`, so `import "ttw-client"` in a
//! fresh project failed with `ERR_MODULE_NOT_FOUND`.
//!
//! Needs npm and the client's compiler (`npm ci` in `clients/typescript`),
//! and Python's `venv` and `pip` with the registry (`setuptools` for the
//! wheel's build), as `.ci/run` has them; without `npm ci` when the tests
//! are built it is compiled as ignored (`build.rs` sets `ttw_no_npm_client`).
#![cfg(target_os = "linux")]

#[path = "support/ttw_server.rs"]
mod ttw_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TOKEN: &str = "app-token-0123456789";

/// The client's folder in this repository.
fn client(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../clients")
        .join(name)
}

/// A fresh folder of this test's own.
fn fresh(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ttw_package_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `program args` in `dir`; its output, once it succeeded.
fn run(dir: &Path, program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(program);
    command.args(args).current_dir(dir);
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} in {}:\n{}\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The block of `readme` marked as the quick start, as written.
fn quick_start(readme: &Path) -> String {
    marked(readme, "<!-- quick-start")
}

/// The block of `readme` after `mark`, as written.
fn marked(readme: &Path, mark: &str) -> String {
    let text = std::fs::read_to_string(readme).unwrap();
    let (_, after) = text
        .split_once(mark)
        .unwrap_or_else(|| panic!("the README marks {mark}"));
    let (_, block) = after.split_once("```").unwrap();
    let (_, body) = block.split_once('\n').unwrap();
    let (code, _) = body.split_once("```").unwrap();
    code.to_string()
}

/// A `ttw server` on a fresh SQLite file with the default queue, the pull
/// queue `thumbnails` and a token that may schedule, read and consume: the
/// process and its URL.
async fn server(dir: &Path) -> (tokio::process::Child, String) {
    let database = format!("database = \"{}\"", dir.join("tasks.db").display());
    let config = ttw_server::write_config(
        dir,
        &database,
        r#"[[queues]]
name = "default"

[[queues]]
name = "thumbnails"
pull = true

[[tokens]]
name = "app"
secret_env = "TTW_TOKEN_APP"
scopes = ["schedule", "read", "consume"]
"#,
    );
    let (child, addr) = ttw_server::start(&config, &[("TTW_TOKEN_APP", TOKEN)]).await;
    (child, format!("http://{addr}"))
}

/// The quick start's lines: scheduled, read back as scheduled, cancelled.
fn said_what_the_quick_start_does(out: &Output) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(": created, scheduled, due "),
        "scheduled and read back:\n{text}"
    );
    assert!(text.contains(": cancelled"), "cancelled:\n{text}");
}

/// The README's worker, run as written (`program file` in `dir`): two
/// images scheduled in `thumbnails`, one resized, one given up on; then
/// SIGTERM, and the worker ends by itself.
async fn the_worker_runs_as_written(dir: &Path, program: &str, file: &str, url: &str) {
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for image in [3, -1] {
        let body = serde_json::json!({"queue": "thumbnails", "payload": {"image": image}});
        let made: serde_json::Value = http
            .post(format!("{url}/v1/tasks"))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap();
        ids.push(made["id"].as_i64().unwrap());
    }
    let mut worker = tokio::process::Command::new(program)
        .arg(file)
        .current_dir(dir)
        .env("TTW_URL", url)
        .env("TTW_TOKEN", TOKEN)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let get = |id: i64| {
        let http = http.clone();
        async move {
            let task: serde_json::Value = http
                .get(format!("{url}/v1/tasks/{id}"))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .map(|t| serde_json::from_str(&t).unwrap())
                .unwrap();
            task
        }
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let (done, dead) = loop {
        let (done, dead) = (get(ids[0]).await, get(ids[1]).await);
        if (done["state"] == "done" && dead["state"] == "dead")
            || tokio::time::Instant::now() > deadline
        {
            break (done, dead);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(
        (&dead["state"], &dead["last_error"]),
        (
            &serde_json::json!("dead"),
            &serde_json::json!("no such image")
        ),
        "{dead}"
    );
    let pid = worker.id().unwrap().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), worker.wait())
        .await
        .expect("the worker stops at SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
#[cfg_attr(
    ttw_no_npm_client,
    ignore = "needs `npm ci` in clients/typescript when built"
)]
async fn the_typescript_client_installs_from_its_tarball_and_runs_its_quick_start() {
    let source = client("typescript");
    // A checkout as a user has it: no `dist/` (what a build left in the
    // repository's folder must not make the package look complete), the
    // compiler from `npm ci`.
    let checkout = fresh("npm_checkout");
    for file in [
        "package.json",
        "package-lock.json",
        "tsconfig.json",
        "README.md",
    ] {
        std::fs::copy(source.join(file), checkout.join(file)).unwrap();
    }
    run(
        &checkout,
        "cp",
        &["-r", source.join("src").to_str().unwrap(), "src"],
        &[],
    );
    std::os::unix::fs::symlink(source.join("node_modules"), checkout.join("node_modules")).unwrap();
    let packed = fresh("npm_pack");
    let out = run(
        &checkout,
        "npm",
        &[
            "pack",
            "--silent",
            "--pack-destination",
            packed.to_str().unwrap(),
        ],
        &[],
    );
    let tarball = packed.join(String::from_utf8_lossy(&out.stdout).trim());
    let listing = run(&packed, "tar", &["tzf", tarball.to_str().unwrap()], &[]);
    let listing = String::from_utf8_lossy(&listing.stdout);
    for file in [
        "package/dist/index.js",
        "package/dist/index.d.ts",
        "package/dist/generated.js",
        "package/dist/generated.d.ts",
    ] {
        assert!(
            listing.lines().any(|l| l == file),
            "{file} packed:\n{listing}"
        );
    }

    let project = fresh("npm_project");
    std::fs::write(
        project.join("package.json"),
        r#"{"name": "a-user-s-project", "version": "1.0.0", "type": "module", "private": true}"#,
    )
    .unwrap();
    run(
        &project,
        "npm",
        &[
            "install",
            "--silent",
            "--offline",
            "--no-audit",
            "--no-fund",
            tarball.to_str().unwrap(),
        ],
        &[],
    );
    std::fs::write(
        project.join("quick.mjs"),
        quick_start(&source.join("README.md")),
    )
    .unwrap();
    let (mut child, url) = server(&project).await;
    let out = run(
        &project,
        "node",
        &["quick.mjs"],
        &[("TTW_URL", &url), ("TTW_TOKEN", TOKEN)],
    );
    said_what_the_quick_start_does(&out);
    std::fs::write(
        project.join("worker.mjs"),
        marked(&source.join("README.md"), "<!-- worker"),
    )
    .unwrap();
    the_worker_runs_as_written(&project, "node", "worker.mjs", &url).await;
    child.kill().await.ok();
    for dir in [&project, &packed, &checkout] {
        std::fs::remove_dir_all(dir).ok();
    }
}

#[tokio::test]
async fn the_python_client_installs_as_a_wheel_and_runs_its_quick_start() {
    let source = client("python");
    // A copy of the checkout: a wheel's build writes `build/` and an
    // `.egg-info` beside the sources it builds.
    let checkout = fresh("python_checkout");
    for part in ["pyproject.toml", "README.md"] {
        std::fs::copy(source.join(part), checkout.join(part)).unwrap();
    }
    run(
        &checkout,
        "cp",
        &["-r", source.join("src").to_str().unwrap(), "src"],
        &[],
    );
    let project = fresh("python_project");
    let wheels = project.join("dist");
    run(
        &project,
        "python3",
        &[
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "-w",
            wheels.to_str().unwrap(),
            checkout.to_str().unwrap(),
        ],
        &[],
    );
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("pip built a wheel");
    run(&project, "python3", &["-m", "venv", "venv"], &[]);
    let python = project.join("venv/bin/python");
    let python = python.to_str().unwrap();
    run(
        &project,
        python,
        &[
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-index",
            wheel.to_str().unwrap(),
        ],
        &[],
    );
    std::fs::write(
        project.join("quick.py"),
        quick_start(&source.join("README.md")),
    )
    .unwrap();
    let (mut child, url) = server(&project).await;
    // Run from the project, not the source: the installed package is the
    // one imported.
    let out = run(
        &project,
        python,
        &["quick.py"],
        &[("TTW_URL", &url), ("TTW_TOKEN", TOKEN)],
    );
    said_what_the_quick_start_does(&out);
    std::fs::write(
        project.join("worker.py"),
        marked(&source.join("README.md"), "<!-- worker"),
    )
    .unwrap();
    the_worker_runs_as_written(&project, python, "worker.py", &url).await;
    child.kill().await.ok();
    for dir in [&project, &checkout] {
        std::fs::remove_dir_all(dir).ok();
    }
}
