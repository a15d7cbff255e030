//! The `ttw` tool, built in this package so its tests can run it as a child
//! process (Cargo builds a package's own binaries for its tests): the same
//! `ttw::main` that the `ttw` binary runs.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ttw::main()
}
