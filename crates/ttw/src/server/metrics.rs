//! `/metrics` for Prometheus, on the API's own listener and behind the
//! API's tokens (scope `read`: Prometheus sends it as `authorization:
//! credentials`): the node's counters and histograms (deliveries,
//! attempts, retries, lateness, handler durations, leases; see
//! `ttw_durable::describe_metrics`) and the task counts per queue and
//! state, read at each scrape and bounded as the console's are (at most
//! [`BOUND`] a queue and state: a few milliseconds with 10 million tasks).

use std::time::Duration;

use axum::extract::{Extension, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use super::extract::{Auth, Read};
use super::service::Shared;
use crate::error::{Failure, Result};

/// How often the exporter's histograms are tidied.
pub(crate) const REFRESH: Duration = Duration::from_secs(10);

/// Where a `ttw_tasks` count stops: a gauge at it means at least that many.
pub(crate) const BOUND: u64 = 10_000;

/// Installs this process's recorder: before the scheduler starts, so that
/// its metrics are recorded.
pub(crate) fn install() -> Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|err| Failure(format!("cannot install the metrics recorder: {err}")))?;
    ttw_durable::describe_metrics();
    Ok(handle)
}

/// `GET /metrics` on `api`'s tokens.
pub(crate) fn routes(api: Shared, handle: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(render))
        .layer(Extension(handle))
        .with_state(api)
}

async fn render(
    State(api): State<Shared>,
    _: Auth<Read>,
    Extension(handle): Extension<PrometheusHandle>,
) -> Response {
    if let Err(err) = api.store.publish_bounded_task_counts(BOUND).await {
        tracing::warn!(%err, "ttw server: reading the task counts for /metrics failed");
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
        .into_response()
}

/// Every [`REFRESH`]: the exporter's upkeep. Runs until the server stops.
pub(crate) async fn refresh(handle: PrometheusHandle) {
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        handle.run_upkeep();
    }
}
