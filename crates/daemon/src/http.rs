//! The optional HTTP endpoint (`--http 127.0.0.1:PORT`, off by default):
//! Prometheus `/metrics`, a read-only JSON view at `/api/v1/state`
//! (`?conns=1` adds the connection table), the health checks at
//! `/api/v1/checks`, `/healthz`, and the live dashboard at `/`
//! ([`crate::dash`]). Served from the snapshot the daemon's
//! owner publishes ([`crate::handle::Snapshot`]): a scrape never waits for
//! a reload. Only the connection table is asked of the owner.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use crate::handle::{DaemonHandle, Msg};

#[derive(Deserialize)]
struct StateQuery {
    #[serde(default)]
    conns: Option<u8>,
}

async fn metrics(State(d): State<DaemonHandle>) -> Response {
    let snap = d.fresh().await;
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        crate::metrics::render(&snap),
    )
        .into_response()
}

async fn state(State(d): State<DaemonHandle>, Query(q): Query<StateQuery>) -> Response {
    if q.conns.unwrap_or(0) == 0 {
        return json(d.fresh().await.api_state.to_string());
    }
    match d.ask(|reply| Msg::ApiState { reply }).await {
        Some(v) => axum::Json(v).into_response(),
        None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn checks(State(d): State<DaemonHandle>) -> Response {
    json(d.fresh().await.checks.to_string())
}

/// JSON text as `axum::Json` would answer it.
fn json(text: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// The router, separate from binding so tests can drive it.
pub fn router(d: DaemonHandle) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/api/v1/state", get(state))
        .route("/api/v1/checks", get(checks))
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(crate::dash::router(&d))
        .with_state(d)
}
