//! tokio-timing-wheel
#![forbid(unsafe_code)]
#![allow(dead_code)]
mod wheel;
