//! The optional HTTP endpoint (`--http 127.0.0.1:PORT`, off by default):
//! Prometheus `/metrics`, a read-only JSON view at `/api/v1/state`
//! (`?conns=1` adds the connection table), the health checks at
//! `/api/v1/checks`, and `/healthz`.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use crate::daemon::Daemon;

type Shared = Arc<Mutex<Daemon>>;

#[derive(Deserialize)]
struct StateQuery {
    #[serde(default)]
    conns: Option<u8>,
}

async fn metrics(State(d): State<Shared>) -> Response {
    match d.lock() {
        Ok(d) => (
            [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
            d.metrics(),
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn state(State(d): State<Shared>, Query(q): Query<StateQuery>) -> Response {
    match d.lock() {
        Ok(d) => axum::Json(crate::view::api_state(&d, q.conns.unwrap_or(0) != 0)).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn checks(State(d): State<Shared>) -> Response {
    match d.lock().map(|d| d.checks()) {
        Ok(Ok(v)) => axum::Json(v).into_response(),
        _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// The router, separate from binding so tests can drive it.
pub fn router(d: Shared) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/api/v1/state", get(state))
        .route("/api/v1/checks", get(checks))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(d)
}
