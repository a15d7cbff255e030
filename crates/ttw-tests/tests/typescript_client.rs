//! The TypeScript client's own tests (`clients/typescript`: `tsc`, then
//! `node --test`) against the `ttw` binary built for these tests: every
//! call of the client on a real `ttw server`, its errors, its retries
//! through a stopped server, a real delivery's signature, and its
//! generated types held equal to the binary's OpenAPI document.
//!
//! Needs `npm ci` in `clients/typescript` (its compiler): without it when
//! the tests are built, outside CI, it is compiled as ignored (`build.rs`
//! sets `ttw_no_npm_client`); `.ci/run` runs `npm ci`.

use std::process::Command;

#[test]
#[cfg_attr(
    ttw_no_npm_client,
    ignore = "needs `npm ci` in clients/typescript when built"
)]
fn the_typescript_client_s_tests_pass_against_the_server() {
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/typescript");
    let out = Command::new("npm")
        .args(["test", "--silent"])
        .current_dir(client)
        .env("TTW_BIN", env!("CARGO_BIN_EXE_ttw-under-test"))
        .output()
        .expect("npm runs the client's tests");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the TypeScript client's tests failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("# pass "), "no test ran:\n{stdout}");
    assert!(stdout.contains("# fail 0"), "{stdout}");
}
