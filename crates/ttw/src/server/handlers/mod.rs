//! The handlers: each takes what its route needs through the extractors
//! of [`extract`](super::extract), calls the [`service`](super::service),
//! and answers a type of [`wire`](super::wire). Each carries its part of
//! the OpenAPI document (`#[utoipa::path]`).

pub(crate) mod cluster;
pub(crate) mod health;
pub(crate) mod pull;
pub(crate) mod queues;
pub(crate) mod recurring;
pub(crate) mod tasks;
