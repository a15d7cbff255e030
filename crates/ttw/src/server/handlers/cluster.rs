//! `/v1/nodes`, `/v1/stats` and `/v1/whoami`: what the console shows of
//! the nodes, of this node's throughput and lateness, and of the caller.

use axum::extract::State;
use axum::Json;

use super::super::cluster::{NodeView, NodesView, StatsView, WhoamiView};
use super::super::extract::{Auth, Read};
use super::super::refusal::Answer;
use super::super::service::Shared;

/// The nodes that have joined and not left, with the leases each holds.
#[utoipa::path(get, path = "/v1/nodes", tag = "cluster",
    responses((status = 200, description = "The nodes, by id", body = NodesView)))]
pub(crate) async fn nodes(State(api): State<Shared>, _: Auth<Read>) -> Answer<Json<NodesView>> {
    let nodes = api.store.nodes().await?;
    Ok(Json(NodesView {
        nodes: nodes.iter().map(NodeView::from).collect(),
    }))
}

/// This instance's node over the last hour: tasks done, failed, retried
/// and dead per second, and the lateness percentiles of its deliveries,
/// one point per sampling interval (`[console] stats_every`).
#[utoipa::path(get, path = "/v1/stats", tag = "cluster",
    responses((status = 200, description = "The points, oldest first", body = StatsView)))]
pub(crate) async fn stats(State(api): State<Shared>, _: Auth<Read>) -> Json<StatsView> {
    Json(api.stats.view())
}

/// The caller's token: its name, scopes and queues.
#[utoipa::path(get, path = "/v1/whoami", tag = "cluster",
    responses((status = 200, description = "The token", body = WhoamiView)))]
pub(crate) async fn whoami(Auth(token, ..): Auth<Read>) -> Json<WhoamiView> {
    Json(WhoamiView::from(token.as_ref()))
}
