//! Tells the tests whether PostgreSQL is there: without `DATABASE_URL` at
//! build time the PostgreSQL cases are compiled as `#[ignore]`d, so the test
//! report shows them as not run instead of counting them as passed. The
//! same for the dashboard's browser test without `chromedriver`, and the
//! JetStream tests without `nats-server`, and the failover tests without
//! `pg_autoctl` (pg_auto_failover), the Python client's tests without
//! pytest and the TypeScript client's without its `npm ci`, except
//! under `CI`, where `.ci/run` installs it and a missing one must fail.

fn main() {
    println!("cargo:rerun-if-env-changed=DATABASE_URL");
    println!("cargo:rustc-check-cfg=cfg(ttw_no_postgres)");
    if std::env::var("DATABASE_URL").map_or(true, |url| url.is_empty()) {
        println!("cargo:rustc-cfg=ttw_no_postgres");
    }
    println!("cargo:rerun-if-env-changed=CI");
    println!("cargo:rustc-check-cfg=cfg(ttw_no_browser)");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    let driver = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .iter()
        .any(|p| std::path::Path::new(p).exists());
    if !ci && !driver {
        println!("cargo:rustc-cfg=ttw_no_browser");
    }
    println!("cargo:rustc-check-cfg=cfg(ttw_no_nats)");
    let nats = [
        "/usr/sbin/nats-server",
        "/usr/bin/nats-server",
        "/usr/local/bin/nats-server",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists());
    if !ci && !nats {
        println!("cargo:rustc-cfg=ttw_no_nats");
    }
    println!("cargo:rustc-check-cfg=cfg(ttw_no_failover)");
    if !ci && !std::path::Path::new("/usr/bin/pg_autoctl").exists() {
        println!("cargo:rustc-cfg=ttw_no_failover");
    }
    println!("cargo:rustc-check-cfg=cfg(ttw_no_pytest)");
    let pytest = std::process::Command::new("python3")
        .args(["-m", "pytest", "--version"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !ci && !pytest {
        println!("cargo:rustc-cfg=ttw_no_pytest");
    }
    println!("cargo:rustc-check-cfg=cfg(ttw_no_npm_client)");
    let manifest = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let tsc = manifest.join("../../clients/typescript/node_modules/.bin/tsc");
    println!("cargo:rerun-if-changed={}", tsc.display());
    if !ci && !tsc.exists() {
        println!("cargo:rustc-cfg=ttw_no_npm_client");
    }
}
