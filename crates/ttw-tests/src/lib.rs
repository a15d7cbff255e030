//! The workspace's integration tests that need real servers and processes
//! (see `tests/`); nothing to use here.
#![forbid(unsafe_code)]
