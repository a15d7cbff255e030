//! Tells the crate's own tests whether PostgreSQL is there: without
//! `DATABASE_URL` at build time the PostgreSQL half of the statement
//! conformance suite (`src/conformance.rs`) is compiled as
//! `#[ignore]`d, so the report shows it as not run rather than passed.
//! Nothing outside `cfg(test)` reads it.

fn main() {
    println!("cargo:rerun-if-env-changed=DATABASE_URL");
    println!("cargo:rustc-check-cfg=cfg(ttw_no_postgres)");
    if std::env::var("DATABASE_URL").map_or(true, |url| url.is_empty()) {
        println!("cargo:rustc-cfg=ttw_no_postgres");
    }
}
