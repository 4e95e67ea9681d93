//! The optional HTTP endpoint (`--http 127.0.0.1:PORT`, off by default):
//! Prometheus `/metrics`, `/healthz`, REST API v1 under `/api/v1/`
//! ([`crate::api`]: the JSON view at `/api/v1/state`, the health checks at
//! `/api/v1/checks`, services, real servers, ...) and the live dashboard
//! at `/` ([`crate::dash`]). Served from the snapshot the daemon's
//! owner publishes ([`crate::handle::Snapshot`]): a scrape never waits for
//! a reload. Only the connection table is asked of the owner.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::handle::DaemonHandle;

async fn metrics(State(d): State<DaemonHandle>) -> Response {
    let snap = d.fresh().await;
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        crate::metrics::render(&snap),
    )
        .into_response()
}

/// The router, separate from binding so tests can drive it.
pub fn router(d: DaemonHandle, api: crate::api::Policy, rate: u32) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(crate::dash::router(&d))
        .with_state(d.clone())
        .merge(crate::api::router(d, api, rate))
}
