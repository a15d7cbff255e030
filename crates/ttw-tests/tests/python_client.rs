//! The Python client's own tests (`clients/python`, pytest) against the
//! `ttw` binary built for these tests: every call of the client on a real
//! `ttw server`, its typed errors, its retries through a stopped server,
//! a real delivery's signature, and its generated types held equal to the
//! binary's OpenAPI document.
//!
//! Without pytest when the tests are built, outside CI, it is compiled as
//! ignored (`build.rs` sets `ttw_no_pytest`); `.ci/run` installs pytest.

use std::process::Command;

#[test]
#[cfg_attr(
    ttw_no_pytest,
    ignore = "needs pytest (python3 -m pip install pytest) when built"
)]
fn the_python_client_s_tests_pass_against_the_server() {
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/python");
    let out = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", client])
        .env("TTW_BIN", env!("CARGO_BIN_EXE_ttw-under-test"))
        .output()
        .expect("python3 runs pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the Python client's tests failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" passed"), "no test ran:\n{stdout}");
}
