//! The optional HTTP endpoint (`--http 127.0.0.1:PORT`, off by default):
//! Prometheus `/metrics`, `/healthz`, REST API v1 under `/api/v1/`
//! ([`crate::api`]: the JSON view at `/api/v1/state`, the health checks at
//! `/api/v1/checks`, services, real servers, ...) and the live dashboard
//! at `/` ([`crate::dash`]). Served from the snapshot the daemon's
//! owner publishes ([`crate::handle::Snapshot`]): a scrape never waits for
//! a reload. Only the connection table is asked of the owner. Plain HTTP,
//! or HTTPS with `--http-tls-cert` ([`crate::tls`]).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::handle::DaemonHandle;
use crate::tls::{Peer, TlsListener};

async fn metrics(State(d): State<DaemonHandle>) -> Response {
    let snap = d.fresh().await;
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        crate::metrics::render(&snap),
    )
        .into_response()
}

/// The router, separate from binding so tests can drive it. The
/// dashboard is read as the API is (`--api-reads`); `/metrics` and
/// `/healthz` are open.
pub(crate) fn router(d: DaemonHandle, api: crate::api::Policy, rate: u32) -> Router {
    let api = Arc::new(api);
    let dash = crate::dash::router(&d).route_layer(axum::middleware::from_fn_with_state(
        api.clone(),
        crate::api::read_gate,
    ));
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(dash)
        .with_state(d.clone())
        .merge(crate::api::router(d, api, rate))
}

/// Serve `app` on `listener` until `shutdown`, over TLS with `tls`; each
/// request carries its [`Peer`].
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let app = app.into_make_service_with_connect_info::<Peer>();
    let served = match tls {
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        Some(config) => {
            axum::serve(TlsListener::new(listener, config), app)
                .with_graceful_shutdown(shutdown)
                .await
        }
    };
    if let Err(e) = served {
        tracing::error!("HTTP endpoint: {e}");
    }
}
