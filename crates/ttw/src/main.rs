//! `ttw`, the operator's tool for `ttw-durable` task stores: see `ttw --help`.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ttw::main()
}
