//! REST API v1 on rvsd's HTTP listener (`/api/v1/...`): services, real
//! servers, the whole table, pools, sync daemons, the director's drain,
//! and reads of connections, VRRP, announcements and health checks, with
//! an OpenAPI 3.1 document at `/api/v1/openapi.json` collected from the
//! handlers (`routes.rs`). Writes go through the control plane's one
//! entry point as the API's source, so a service another source owns is
//! read-only here (409 naming its owner); `If-Match` is checked in the
//! same owner turn as the write. Every request passes [`gate`]: the rate
//! bound per client, authentication (the bearer token or a verified
//! client certificate), the writes switch, and one audit line per write
//! (target `rvs::audit`, naming who).

mod error;
mod guard;
mod ids;
mod routes;
mod types;

use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};

use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rvs_control::owner::{Change, Owner, Submitted};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) use error::ApiError;
pub(crate) use guard::Policy;
use guard::Who;
pub use guard::{ApiOptions, Reads};

use crate::daemon::Daemon;
use crate::handle::DaemonHandle;
use crate::tls::Peer;

/// Largest request body the API reads.
pub const BODY_LIMIT: usize = 1 << 20;

/// A write's plan, run by the owner on the table as it is: check the
/// request's preconditions and state the change.
pub(crate) type Plan = Box<dyn FnOnce(&Daemon) -> Result<Change, ApiError> + Send>;

/// Run a write's plan and submit its change as the API's (in the owner).
pub(crate) fn write(d: &mut Daemon, plan: Plan) -> Result<Submitted, ApiError> {
    let change = plan(d)?;
    d.submit(Owner::Api, change).map_err(ApiError::from)
}

/// The handlers' state.
#[derive(Clone)]
pub(crate) struct Api {
    d: DaemonHandle,
    policy: Arc<Policy>,
    limiter: Arc<Mutex<guard::RateLimiter>>,
    /// The document, as served.
    doc: Arc<OnceLock<String>>,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "rvs REST API",
        version = "1",
        description = "rvsd's REST API v1: services, real servers, the table, pools, sync daemons, the director's drain, and reads. Writes need `--api-writes` and, when rvsd has `--api-token-file`, `Authorization: Bearer TOKEN`, or, when rvsd has `--api-client-ca`, a client certificate that CA signed (HTTPS)."
    ),
    components(schemas(error::ErrorBody))
)]
struct Doc;

/// The bearer token scheme, required by every write.
struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
        };
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        // Reads: the token when rvsd asks for it (--api-reads token);
        // writes: always, when rvsd has one.
        openapi.security = Some(vec![
            SecurityRequirement::new("bearer", Vec::<String>::new()),
            SecurityRequirement::default(),
        ]);
        for item in openapi.paths.paths.values_mut() {
            for op in [
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                op.security = Some(vec![SecurityRequirement::new(
                    "bearer",
                    Vec::<String>::new(),
                )]);
            }
        }
    }
}

/// Every route with its handlers, collected into the document.
fn api_routes() -> OpenApiRouter<Api> {
    use routes::*;
    OpenApiRouter::with_openapi(Doc::openapi())
        .routes(routes!(list_services, create_service))
        .routes(routes!(get_service, patch_service, delete_service))
        .routes(routes!(list_reals, create_real))
        .routes(routes!(get_real, patch_real, delete_real))
        .routes(routes!(drain_real))
        .routes(routes!(undrain_real))
        .routes(routes!(list_laddrs, add_laddr))
        .routes(routes!(del_laddr))
        .routes(routes!(get_table, put_table))
        .routes(routes!(zero))
        .routes(routes!(list_sync))
        .routes(routes!(get_sync, start_sync, stop_sync))
        .routes(routes!(drain))
        .routes(routes!(undrain))
        .routes(routes!(connections))
        .routes(routes!(vrrp))
        .routes(routes!(announce))
        .routes(routes!(checks))
        .routes(routes!(state))
        .routes(routes!(openapi))
}

/// The API's router (state applied), for `http.rs` to merge.
pub(crate) fn router(d: DaemonHandle, policy: Arc<Policy>, rate: u32) -> axum::Router {
    let (router, mut doc) = api_routes().split_for_parts();
    // After the routes are in: the writes' security is set per operation.
    utoipa::Modify::modify(&Bearer, &mut doc);
    let text = doc.to_json().unwrap_or_default();
    let api = Api {
        d,
        policy,
        limiter: Arc::new(Mutex::new(guard::RateLimiter::new(rate))),
        doc: Arc::new(OnceLock::from(text)),
    };
    router
        .layer(axum::middleware::from_fn_with_state(api.clone(), gate))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(api)
}

fn refused(status: StatusCode, code: &str, message: &str) -> Response {
    ApiError::new(status, code, message).into_response()
}

/// The connection's peer: its address and verified client certificate.
fn peer(req: &Request) -> (IpAddr, Option<Arc<str>>) {
    req.extensions()
        .get::<ConnectInfo<Peer>>()
        .map_or((IpAddr::from([0, 0, 0, 0]), None), |c| {
            (c.0.addr.ip(), c.0.client.clone())
        })
}

/// Whether `policy` admits the request, and who made it.
fn admit(policy: &Policy, write: bool, req: &Request) -> Result<Who, guard::Refusal> {
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let (_, client) = peer(req);
    policy.admit(write, auth, client.as_ref())
}

/// A refusal's answer.
fn refusal(policy: &Policy, refusal: guard::Refusal) -> Response {
    match refusal {
        guard::Refusal::Unauthorized => {
            let mut r = refused(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                policy.credentials_wanted(),
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
        guard::Refusal::WritesDisabled => refused(
            StatusCode::FORBIDDEN,
            "writes_disabled",
            "writes are disabled: start rvsd with --api-writes",
        ),
    }
}

/// Reads outside the API's router (the dashboard): open, or with
/// `--api-reads token` for a request with credentials only.
pub(crate) async fn read_gate(
    State(policy): State<Arc<Policy>>,
    req: Request,
    next: Next,
) -> Response {
    match admit(&policy, false, &req) {
        Ok(_) => next.run(req).await,
        Err(r) => refusal(&policy, r),
    }
}

/// Every request: the rate bound, authentication, the writes switch; an
/// ETag on a GET whose handler set none; one audit line per write.
async fn gate(State(api): State<Api>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let write = !matches!(method, Method::GET | Method::HEAD);
    let path = req.uri().path().to_owned();
    let (peer, client) = peer(&req);
    let allowed = api
        .limiter
        .lock()
        .ok()
        .map(|mut l| (l.allow(peer, std::time::Instant::now()), l.retry_after()));
    let (resp, who) = match allowed {
        Some((false, after)) => {
            let mut r = refused(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many requests from this address",
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(after.as_secs()));
            (r, None)
        }
        _ => match admit(&api.policy, write, &req) {
            Ok(who) => (next.run(req).await, Some(who)),
            Err(r) => (refusal(&api.policy, r), None),
        },
    };
    if write {
        // Refused requests name the certificate they came with, if any.
        let who = who.map_or_else(
            || client.map_or_else(|| "unauthenticated".to_owned(), |c| format!("cert:{c}")),
            |w| w.to_string(),
        );
        tracing::info!(target: "rvs::audit", %peer, who, %method, path, status = resp.status().as_u16(), "API write");
        return resp;
    }
    with_etag(resp).await
}

/// A 200 GET without an ETag gets one over its body.
async fn with_etag(resp: Response) -> Response {
    if resp.status() != StatusCode::OK || resp.headers().contains_key(header::ETAG) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => {
            if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", guard::etag_bytes(&bytes))) {
                parts.headers.insert(header::ETAG, v);
            }
            Response::from_parts(parts, axum::body::Body::from(bytes))
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[cfg(test)]
mod tests;
