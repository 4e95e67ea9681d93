//! The handlers of REST API v1, each with its `#[utoipa::path]`: the
//! document at `/api/v1/openapi.json` is collected from them as they are
//! mounted ([`super::router`]), so it cannot drift from the routes.
//!
//! Reads are served from the owner's snapshot; writes go through the
//! control plane's one entry point as [`Owner::Api`](rvs_control::owner::Owner)
//! in one owner turn, where `If-Match` is checked against the resource as
//! it is (no other change comes between the check and the write).

use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use rvs_control::owner::Change;
use rvs_control::protocol::{Command, Request as CtlRequest, Response as CtlResponse};
use rvs_core::model::{DestConfig, ServiceConfig, ServiceKey};
use rvs_ipvsadm::snapshot::{DestSnap, ServiceSnap, Snapshot};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use utoipa::IntoParams;

use super::error::{ApiError, Failures};
use super::guard::if_match;
use super::ids;
use super::types::*;
use super::{Api, Plan};
use crate::daemon::Daemon;

/// The raw body, bounded by the router's limit, its rejection as JSON.
pub(crate) struct RawBody(pub axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        axum::body::Bytes::from_request(req, state)
            .await
            .map(RawBody)
            .map_err(|e| {
                let code = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    "too_large"
                } else {
                    "bad_body"
                };
                ApiError::new(e.status(), code, e.body_text())
            })
    }
}

/// A JSON body; an empty one is `T::default()` when `optional`.
fn body<T: DeserializeOwned + Default>(b: &RawBody, optional: bool) -> Result<T, ApiError> {
    if optional && b.0.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    required(b)
}

/// A JSON object as `T`. Every body this API takes is an object: serde
/// would also read a struct from an array of its fields (`[null]` as
/// `{"service": null}`), which the document does not allow, so anything
/// but an object is refused before it is decoded.
fn required<T: DeserializeOwned>(b: &RawBody) -> Result<T, ApiError> {
    let bad = |why: String| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_body",
            format!("the body is not what this route takes: {why}"),
        )
    };
    if b.0.iter().find(|c| !c.is_ascii_whitespace()) != Some(&b'{') {
        return Err(bad("a JSON object is expected".into()));
    }
    serde_json::from_slice(&b.0).map_err(|e| bad(e.to_string()))
}

/// The query string as `T`, its error as JSON.
fn query<T: DeserializeOwned>(uri: &Uri) -> Result<T, ApiError> {
    Query::<T>::try_from_uri(uri)
        .map(|Query(q)| q)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_query", e.body_text()))
}

fn if_match_of(h: &HeaderMap) -> Option<String> {
    h.get(header::IF_MATCH)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// 412 unless `wanted` (the request's `If-Match`) matches `current`.
fn precondition(wanted: &Option<String>, current: &str) -> Result<(), ApiError> {
    match wanted {
        Some(w) if !if_match(w, current) => Err(ApiError::stale(current)),
        _ => Ok(()),
    }
}

/// JSON with an ETag.
fn tagged<T: serde::Serialize>(status: StatusCode, etag: &str, v: &T) -> Response {
    (
        status,
        [(header::ETAG, format!("\"{etag}\""))],
        axum::Json(v),
    )
        .into_response()
}

/// A service as the owner has it, in the snapshot's form (configuration
/// only): what the write's `If-Match` is checked against.
fn owner_snap(d: &Daemon, key: &ServiceKey) -> Result<ServiceSnap, ApiError> {
    let s = d
        .controller()
        .ipvs()
        .service(key)
        .ok_or_else(|| ApiError::not_found(format!("no service {}", ids::service_id(key))))?;
    let mut snap = ServiceSnap::from_config(s.key(), s.config());
    snap.laddrs = s.laddrs().iter().map(|l| l.to_string()).collect();
    snap.dests = s
        .dests()
        .iter()
        .map(|d| DestSnap::from_config(&d.config))
        .collect();
    for spec in &mut snap.quic_lb {
        *spec = crate::view::redacted(spec);
    }
    Ok(snap)
}

fn owner_dest(d: &Daemon, key: &ServiceKey, rs: (IpAddr, u16)) -> Result<DestConfig, ApiError> {
    let s = d
        .controller()
        .ipvs()
        .service(key)
        .ok_or_else(|| ApiError::not_found(format!("no service {}", ids::service_id(key))))?;
    s.dests()
        .iter()
        .find(|x| x.config.addr == rs.0 && x.config.port == rs.1)
        .map(|x| x.config)
        .ok_or_else(|| not_real(key, rs))
}

fn not_real(key: &ServiceKey, rs: (IpAddr, u16)) -> ApiError {
    ApiError::not_found(format!(
        "service {} has no real server {}",
        ids::service_id(key),
        ids::real_id(rs.0, rs.1)
    ))
}

fn commands(commands: Vec<Command>) -> Change {
    Change::Commands {
        commands,
        atomic: true,
    }
}

impl Api {
    /// The table as the snapshot has it.
    async fn table(&self) -> Arc<Snapshot> {
        self.d.fresh().await.table
    }

    /// One service as it is now, asked of the owner: rendered alone,
    /// where a fresh snapshot after a write would render the whole table.
    /// As [`crate::handle::DaemonHandle::fresh`], the last snapshot's when
    /// the owner is busy past [`crate::handle::FRESH_WAIT`].
    async fn service(&self, key: &ServiceKey) -> Result<ServiceSnap, ApiError> {
        let key = *key;
        let asked = tokio::time::timeout(
            crate::handle::FRESH_WAIT,
            self.d
                .ask(|reply| crate::handle::Msg::ApiService { key, reply }),
        )
        .await;
        let found = match asked {
            Ok(Some(found)) => found,
            Ok(None) => return Err(ApiError::stopping()),
            Err(_) => {
                let want = rvs_ipvsadm::snapshot::ServiceKeySnap::from(&key);
                self.d
                    .snapshot()
                    .table
                    .services
                    .iter()
                    .find(|s| s.key == want)
                    .cloned()
            }
        };
        found.ok_or_else(|| ApiError::not_found(format!("no service {}", ids::service_id(&key))))
    }

    async fn real(&self, key: &ServiceKey, rs: (IpAddr, u16)) -> Result<DestSnap, ApiError> {
        self.service(key)
            .await?
            .dests
            .into_iter()
            .find(|d| d.addr == rs.0 && d.port == rs.1)
            .ok_or_else(|| not_real(key, rs))
    }

    /// Run `plan` in the owner and submit its change as the API's; answer
    /// once the data plane carried it out.
    async fn write(&self, plan: Plan) -> Result<(), ApiError> {
        let (r, ticket) = self
            .d
            .ask(|reply| crate::handle::Msg::ApiWrite { plan, reply })
            .await
            .ok_or_else(ApiError::stopping)?;
        crate::handle::applied(ticket).await;
        r.map(|_| ())
    }

    async fn service_answer(
        &self,
        status: StatusCode,
        key: &ServiceKey,
    ) -> Result<Response, ApiError> {
        let s = self.service(key).await?;
        let view = ServiceView::of(&s).ok_or_else(|| ApiError::not_found("no such service"))?;
        Ok(tagged(status, &service_etag(&s), &view))
    }

    async fn real_answer(
        &self,
        status: StatusCode,
        key: &ServiceKey,
        rs: (IpAddr, u16),
    ) -> Result<Response, ApiError> {
        let d = self.real(key, rs).await?;
        Ok(tagged(status, &real_etag(&d), &RealView::of(&d)))
    }

    /// A write to one service, `If-Match` its ETag: `f` states the
    /// commands (in the owner).
    async fn service_write(
        &self,
        key: ServiceKey,
        headers: &HeaderMap,
        f: impl FnOnce(&Daemon) -> Result<Vec<Command>, ApiError> + Send + 'static,
    ) -> Result<(), ApiError> {
        let wanted = if_match_of(headers);
        self.write(Box::new(move |d| {
            precondition(&wanted, &service_etag(&owner_snap(d, &key)?))?;
            f(d).map(commands)
        }))
        .await
    }

    /// An edit of one real server (`rvsadm -e`), `If-Match` its ETag:
    /// `f` changes its configuration as it is (in the owner); answered
    /// with the real server as it then is, taken in the same owner turn
    /// (rendering the whole snapshot for each write's answer was what
    /// bounded the write rate).
    async fn real_edit(
        &self,
        p: &RealPath,
        headers: &HeaderMap,
        f: impl FnOnce(&mut DestConfig) -> Result<(), ApiError> + Send + 'static,
    ) -> Result<Response, ApiError> {
        let (key, rs) = real_path(p)?;
        let wanted = if_match_of(headers);
        let edited = Arc::new(Mutex::new(None));
        let answer = edited.clone();
        self.write(Box::new(move |d| {
            let mut dest = owner_dest(d, &key, rs)?;
            precondition(&wanted, &real_etag(&DestSnap::from_config(&dest)))?;
            f(&mut dest)?;
            check_family(&key, &dest)?;
            *answer.lock().unwrap_or_else(PoisonError::into_inner) =
                crate::view::edited_dest(d, &key, &dest);
            Ok(commands(vec![Command::EditDest { service: key, dest }]))
        }))
        .await?;
        let edited = edited.lock().unwrap_or_else(PoisonError::into_inner).take();
        match edited {
            Some(d) => Ok(tagged(StatusCode::OK, &real_etag(&d), &RealView::of(&d))),
            None => self.real_answer(StatusCode::OK, &key, rs).await,
        }
    }

    /// A control request that is not a table change (sync daemons, the
    /// director's drain): its refusal is a 409 with rvsd's words.
    async fn control(&self, req: CtlRequest, done: &str) -> Result<Response, ApiError> {
        match crate::handle::answer(&self.d, req).await {
            CtlResponse::Error { message, .. } => {
                Err(ApiError::new(StatusCode::CONFLICT, "refused", message))
            }
            _ => Ok(axum::Json(Done {
                message: done.to_owned(),
            })
            .into_response()),
        }
    }
}

/// The path parameter of a service.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct SvcPath {
    /// `tcp-10.0.0.1-80`, `udp-2001:db8::1-53`, `sctp-…`, `fwm-5`, `fwm6-5`.
    #[param(example = "tcp-10.0.0.1-80")]
    pub svc: String,
}

/// The path parameters of a real server.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct RealPath {
    /// The service.
    #[param(example = "tcp-10.0.0.1-80")]
    pub svc: String,
    /// `10.0.0.2-80`, `2001:db8::2-80`.
    #[param(example = "10.0.0.2-80")]
    pub rs: String,
}

fn real_path(p: &RealPath) -> Result<(ServiceKey, (IpAddr, u16)), ApiError> {
    Ok((
        ids::parse_service(&p.svc, "svc")?,
        ids::parse_real(&p.rs, "rs")?,
    ))
}

/// Every virtual service with its real servers.
#[utoipa::path(get, path = "/api/v1/services", tag = "services",
    responses((status = 200, body = Vec<ServiceView>), Failures))]
pub(crate) async fn list_services(State(api): State<Api>) -> Result<Response, ApiError> {
    let t = api.table().await;
    let views: Vec<ServiceView> = t.services.iter().filter_map(ServiceView::of).collect();
    Ok(tagged(StatusCode::OK, &table_etag(&t.services), &views))
}

/// Create a service (`rvsadm -A`, with its real servers `-a` and pool
/// entries), all or nothing.
#[utoipa::path(post, path = "/api/v1/services", tag = "services", request_body = ServiceBody,
    responses((status = 201, body = ServiceView), Failures))]
pub(crate) async fn create_service(
    State(api): State<Api>,
    raw: RawBody,
) -> Result<Response, ApiError> {
    let b: ServiceBody = required(&raw)?;
    let key = b.required_key()?;
    let mut config = ServiceConfig::new(key.af());
    b.apply(&mut config, key.af())?;
    let mut cmds = vec![Command::AddService { key, config }];
    for dest in b.dests(&key)? {
        cmds.push(Command::AddDest { service: key, dest });
    }
    for laddr in b.laddrs()? {
        cmds.push(Command::AddLaddr {
            service: key,
            laddr,
        });
    }
    api.write(Box::new(move |_| Ok(commands(cmds)))).await?;
    api.service_answer(StatusCode::CREATED, &key).await
}

/// One service.
#[utoipa::path(get, path = "/api/v1/services/{svc}", tag = "services", params(SvcPath),
    responses((status = 200, body = ServiceView), Failures))]
pub(crate) async fn get_service(
    State(api): State<Api>,
    Path(p): Path<SvcPath>,
) -> Result<Response, ApiError> {
    let key = ids::parse_service(&p.svc, "svc")?;
    api.service_answer(StatusCode::OK, &key).await
}

/// Change a service's options (`rvsadm -E`): only the fields given.
#[utoipa::path(patch, path = "/api/v1/services/{svc}", tag = "services", params(SvcPath),
    request_body = ServiceBody,
    responses((status = 200, body = ServiceView), Failures))]
pub(crate) async fn patch_service(
    State(api): State<Api>,
    Path(p): Path<SvcPath>,
    headers: HeaderMap,
    raw: RawBody,
) -> Result<Response, ApiError> {
    let key = ids::parse_service(&p.svc, "svc")?;
    let b: ServiceBody = required(&raw)?;
    if let Some(k) = b.key()?
        && k != key
    {
        return Err(ApiError::field(
            "address",
            "a service's identity cannot change: create another",
        ));
    }
    api.service_write(key, &headers, move |d| {
        let mut config = d
            .controller()
            .ipvs()
            .service(&key)
            .map(|s| s.config().clone())
            .ok_or_else(|| ApiError::not_found("no such service"))?;
        b.apply(&mut config, key.af())?;
        Ok(vec![Command::EditService { key, config }])
    })
    .await?;
    api.service_answer(StatusCode::OK, &key).await
}

/// Delete a service and its real servers (`rvsadm -D`).
#[utoipa::path(delete, path = "/api/v1/services/{svc}", tag = "services", params(SvcPath),
    responses((status = 204, description = "Deleted"), Failures))]
pub(crate) async fn delete_service(
    State(api): State<Api>,
    Path(p): Path<SvcPath>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let key = ids::parse_service(&p.svc, "svc")?;
    api.service_write(key, &headers, move |_| {
        Ok(vec![Command::DelService { key }])
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A service's real servers.
#[utoipa::path(get, path = "/api/v1/services/{svc}/reals", tag = "reals", params(SvcPath),
    responses((status = 200, body = Vec<RealView>), Failures))]
pub(crate) async fn list_reals(
    State(api): State<Api>,
    Path(p): Path<SvcPath>,
) -> Result<Response, ApiError> {
    let key = ids::parse_service(&p.svc, "svc")?;
    let s = api.service(&key).await?;
    let views: Vec<RealView> = s.dests.iter().map(RealView::of).collect();
    Ok(tagged(StatusCode::OK, &service_etag(&s), &views))
}

/// Add a real server (`rvsadm -a`); `If-Match` is the service's ETag.
#[utoipa::path(post, path = "/api/v1/services/{svc}/reals", tag = "reals", params(SvcPath),
    request_body = RealBody,
    responses((status = 201, body = RealView), Failures))]
pub(crate) async fn create_real(
    State(api): State<Api>,
    Path(p): Path<SvcPath>,
    headers: HeaderMap,
    raw: RawBody,
) -> Result<Response, ApiError> {
    let key = ids::parse_service(&p.svc, "svc")?;
    let b: RealBody = required(&raw)?;
    let dest = b.new_dest()?;
    check_family(&key, &dest)?;
    let rs = (dest.addr, dest.port);
    api.service_write(key, &headers, move |_| {
        Ok(vec![Command::AddDest { service: key, dest }])
    })
    .await?;
    api.real_answer(StatusCode::CREATED, &key, rs).await
}

/// One real server.
#[utoipa::path(get, path = "/api/v1/services/{svc}/reals/{rs}", tag = "reals", params(RealPath),
    responses((status = 200, body = RealView), Failures))]
pub(crate) async fn get_real(
    State(api): State<Api>,
    Path(p): Path<RealPath>,
) -> Result<Response, ApiError> {
    let (key, rs) = real_path(&p)?;
    api.real_answer(StatusCode::OK, &key, rs).await
}

/// Change a real server (`rvsadm -e`): weight, forwarding, thresholds.
#[utoipa::path(patch, path = "/api/v1/services/{svc}/reals/{rs}", tag = "reals", params(RealPath),
    request_body = RealBody,
    responses((status = 200, body = RealView), Failures))]
pub(crate) async fn patch_real(
    State(api): State<Api>,
    Path(p): Path<RealPath>,
    headers: HeaderMap,
    raw: RawBody,
) -> Result<Response, ApiError> {
    let b: RealBody = required(&raw)?;
    api.real_edit(&p, &headers, move |dest| b.apply(dest)).await
}

/// Remove a real server (`rvsadm -d`).
#[utoipa::path(delete, path = "/api/v1/services/{svc}/reals/{rs}", tag = "reals", params(RealPath),
    responses((status = 204, description = "Deleted"), Failures))]
pub(crate) async fn delete_real(
    State(api): State<Api>,
    Path(p): Path<RealPath>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (key, rs) = real_path(&p)?;
    let wanted = if_match_of(&headers);
    api.write(Box::new(move |d| {
        let dest = owner_dest(d, &key, rs)?;
        precondition(&wanted, &real_etag(&DestSnap::from_config(&dest)))?;
        Ok(commands(vec![Command::DelDest {
            service: key,
            addr: rs.0,
            port: rs.1,
        }]))
    }))
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Drain a real server: weight 0, its weight kept for `undrain` in the
/// real server's own record (so it lasts across a restart of rvsd as the
/// record does).
#[utoipa::path(post, path = "/api/v1/services/{svc}/reals/{rs}/drain", tag = "reals", params(RealPath),
    responses((status = 200, body = RealView), Failures))]
pub(crate) async fn drain_real(
    State(api): State<Api>,
    Path(p): Path<RealPath>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    api.real_edit(&p, &headers, move |dest| {
        if dest.weight != 0 {
            dest.drained_from = Some(dest.weight);
        }
        dest.weight = 0;
        Ok(())
    })
    .await
}

/// Undrain a real server: the weight it had before `drain`.
#[utoipa::path(post, path = "/api/v1/services/{svc}/reals/{rs}/undrain", tag = "reals", params(RealPath),
    responses((status = 200, body = RealView), Failures))]
pub(crate) async fn undrain_real(
    State(api): State<Api>,
    Path(p): Path<RealPath>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (_, rs) = real_path(&p)?;
    api.real_edit(&p, &headers, move |dest| {
        dest.weight = dest.drained_from.take().ok_or_else(|| {
            ApiError::new(
                StatusCode::CONFLICT,
                "not_drained",
                format!(
                    "{} was not drained through the API",
                    ids::real_id(rs.0, rs.1)
                ),
            )
        })?;
        Ok(())
    })
    .await
}

/// The whole table.
#[utoipa::path(get, path = "/api/v1/table", tag = "table",
    responses((status = 200, body = TableView), Failures))]
pub(crate) async fn get_table(State(api): State<Api>) -> Result<Response, ApiError> {
    let t = api.table().await;
    let view = TableView {
        services: t.services.iter().filter_map(ServiceView::of).collect(),
    };
    Ok(tagged(StatusCode::OK, &table_etag(&t.services), &view))
}

/// Replace the API's services by these, as one atomic difference (as
/// `rvsadm -R` would). Another source's services may be listed as they
/// are (they are left alone); listing one changed is refused with 409.
#[utoipa::path(put, path = "/api/v1/table", tag = "table", request_body = TableBody,
    responses((status = 200, body = TableView), Failures))]
pub(crate) async fn put_table(
    State(api): State<Api>,
    headers: HeaderMap,
    raw: RawBody,
) -> Result<Response, ApiError> {
    let b: TableBody = required(&raw)?;
    let mut defs = Vec::with_capacity(b.services.len());
    for s in &b.services {
        let key = s.required_key()?;
        let mut config = ServiceConfig::new(key.af());
        s.apply(&mut config, key.af())?;
        defs.push(rvs_control::state::ServiceDef {
            key,
            config,
            dests: s.dests(&key)?,
            laddrs: s.laddrs()?,
        });
    }
    let wanted = if_match_of(&headers);
    api.write(Box::new(move |d| {
        let ipvs = d.controller().ipvs();
        if wanted.is_some() {
            let snaps: Vec<ServiceSnap> = ipvs
                .services()
                .filter_map(|s| owner_snap(d, s.key()).ok())
                .collect();
            precondition(&wanted, &table_etag(&snaps))?;
        }
        // Another source's service listed as it runs is left out; changed,
        // it stays in and the entry point refuses it, naming its owner.
        let mine: Vec<_> = defs
            .into_iter()
            .filter(|def| {
                let other = d
                    .controller()
                    .owner_of(&def.key)
                    .is_some_and(|o| o != rvs_control::owner::Owner::Api);
                !(other && same_as_running(d, def))
            })
            .collect();
        Ok(Change::Replace {
            services: mine,
            partial: false,
        })
    }))
    .await?;
    get_table(State(api)).await
}

/// Whether `def` is the service as it runs.
fn same_as_running(d: &Daemon, def: &rvs_control::state::ServiceDef) -> bool {
    let Some(s) = d.controller().ipvs().service(&def.key) else {
        return false;
    };
    let mut want = ServiceSnap::from_config(&def.key, &def.config);
    want.laddrs = def.laddrs.iter().map(|l| l.to_string()).collect();
    want.dests = def.dests.iter().map(DestSnap::from_config).collect();
    let mut have = ServiceSnap::from_config(s.key(), s.config());
    have.laddrs = s.laddrs().iter().map(|l| l.to_string()).collect();
    have.dests = s
        .dests()
        .iter()
        .map(|x| DestSnap::from_config(&x.config))
        .collect();
    have.dests.sort_by_key(|x| (x.addr, x.port));
    want.dests.sort_by_key(|x| (x.addr, x.port));
    want == have
}

/// Zero counters (`rvsadm -Z`), of one service or all.
#[utoipa::path(post, path = "/api/v1/zero", tag = "table", request_body = Option<ZeroBody>,
    responses((status = 200, body = Done), Failures))]
pub(crate) async fn zero(State(api): State<Api>, raw: RawBody) -> Result<Response, ApiError> {
    let b: ZeroBody = body(&raw, true)?;
    let service = b
        .service
        .as_deref()
        .map(|s| ids::parse_service(s, "service"))
        .transpose()?;
    api.write(Box::new(move |_| {
        Ok(commands(vec![Command::Zero { service }]))
    }))
    .await?;
    Ok(axum::Json(Done {
        message: "counters zeroed".into(),
    })
    .into_response())
}

/// A FULLNAT service's local address pool (`rvsadm --get-laddr`).
#[utoipa::path(get, path = "/api/v1/services/{svc}/laddrs", tag = "laddrs", params(SvcPath),
    responses((status = 200, body = Vec<String>), Failures))]
pub(crate) async fn list_laddrs(
    State(api): State<Api>,
    Path(p): Path<SvcPath>,
) -> Result<Response, ApiError> {
    let key = ids::parse_service(&p.svc, "svc")?;
    let s = api.service(&key).await?;
    Ok(tagged(StatusCode::OK, &service_etag(&s), &s.laddrs))
}

/// Add a pool entry (`rvsadm --add-laddr -z`).
#[utoipa::path(post, path = "/api/v1/services/{svc}/laddrs", tag = "laddrs", params(SvcPath),
    request_body = LaddrBody,
    responses((status = 201, body = Vec<String>), Failures))]
pub(crate) async fn add_laddr(
    State(api): State<Api>,
    Path(p): Path<SvcPath>,
    headers: HeaderMap,
    raw: RawBody,
) -> Result<Response, ApiError> {
    let key = ids::parse_service(&p.svc, "svc")?;
    let b: LaddrBody = required(&raw)?;
    let laddr = rvs_core::model::LocalAddrRange::parse(&b.laddr)
        .map_err(|e| ApiError::field("laddr", e.to_string()))?;
    api.service_write(key, &headers, move |_| {
        Ok(vec![Command::AddLaddr {
            service: key,
            laddr,
        }])
    })
    .await?;
    let s = api.service(&key).await?;
    Ok(tagged(StatusCode::CREATED, &service_etag(&s), &s.laddrs))
}

/// The path parameters of a pool entry.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct LaddrPath {
    /// The service.
    #[param(example = "tcp-10.0.0.1-80")]
    pub svc: String,
    /// `ADDR` or `ADDR-ADDR`, as added.
    #[param(example = "10.0.1.1-10.0.1.4")]
    pub laddr: String,
}

/// Remove a pool entry (`rvsadm --del-laddr -z`).
#[utoipa::path(delete, path = "/api/v1/services/{svc}/laddrs/{laddr}", tag = "laddrs", params(LaddrPath),
    responses((status = 204, description = "Removed"), Failures))]
pub(crate) async fn del_laddr(
    State(api): State<Api>,
    Path(p): Path<LaddrPath>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let key = ids::parse_service(&p.svc, "svc")?;
    let laddr = rvs_core::model::LocalAddrRange::parse(&p.laddr)
        .map_err(|e| ApiError::field("laddr", e.to_string()))?;
    api.service_write(key, &headers, move |_| {
        Ok(vec![Command::DelLaddr {
            service: key,
            laddr,
        }])
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The running connection-sync daemons.
#[utoipa::path(get, path = "/api/v1/sync", tag = "sync",
    responses((status = 200, body = Vec<SyncView>), Failures))]
pub(crate) async fn list_sync(State(api): State<Api>) -> Result<Response, ApiError> {
    let t = api.table().await;
    let v: Vec<SyncView> = t.daemons.iter().map(SyncView::of).collect();
    Ok(axum::Json(v).into_response())
}

/// The path parameter of a sync daemon.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct RolePath {
    /// `master` or `backup`.
    #[param(pattern = "^(master|backup)$", example = "backup")]
    pub role: String,
}

fn role(p: &RolePath) -> Result<bool, ApiError> {
    match p.role.as_str() {
        "master" => Ok(true),
        "backup" => Ok(false),
        r => Err(ApiError::field("role", format!("`{r}`: master or backup"))),
    }
}

/// One sync daemon.
#[utoipa::path(get, path = "/api/v1/sync/{role}", tag = "sync", params(RolePath),
    responses((status = 200, body = SyncView), Failures))]
pub(crate) async fn get_sync(
    State(api): State<Api>,
    Path(p): Path<RolePath>,
) -> Result<Response, ApiError> {
    let master = role(&p)?;
    let t = api.table().await;
    t.daemons
        .iter()
        .find(|d| d.master == master)
        .map(|d| axum::Json(SyncView::of(d)).into_response())
        .ok_or_else(|| ApiError::not_found(format!("no {} sync daemon runs", p.role)))
}

/// Start a sync daemon (`rvsadm --start-daemon`).
#[utoipa::path(post, path = "/api/v1/sync/{role}", tag = "sync", params(RolePath),
    request_body = SyncBody,
    responses((status = 200, body = Done), Failures))]
pub(crate) async fn start_sync(
    State(api): State<Api>,
    Path(p): Path<RolePath>,
    raw: RawBody,
) -> Result<Response, ApiError> {
    let master = role(&p)?;
    let b: SyncBody = required(&raw)?;
    if b.interface.is_empty() || b.interface.len() > 15 {
        return Err(ApiError::field(
            "interface",
            "an interface name, 1 to 15 bytes",
        ));
    }
    let group = b
        .group
        .as_deref()
        .map(|g| {
            g.parse::<IpAddr>()
                .ok()
                .filter(IpAddr::is_multicast)
                .ok_or_else(|| {
                    ApiError::field("group", format!("`{g}` is not a multicast address"))
                })
        })
        .transpose()?;
    let cfg = rvs_core::sync::DaemonConfig {
        state: if master {
            rvs_core::sync::SyncState::Master
        } else {
            rvs_core::sync::SyncState::Backup
        },
        mcast_ifn: b.interface,
        syncid: b.syncid.unwrap_or(0),
        sync_maxlen: b.maxlen,
        mcast_group: group,
        mcast_port: b.port.filter(|p| *p != 0),
        mcast_ttl: b.ttl.filter(|t| *t != 0),
    };
    api.control(CtlRequest::StartDaemon(cfg), "sync daemon started")
        .await
}

/// Stop a sync daemon (`rvsadm --stop-daemon`).
#[utoipa::path(delete, path = "/api/v1/sync/{role}", tag = "sync", params(RolePath),
    responses((status = 200, body = Done), Failures))]
pub(crate) async fn stop_sync(
    State(api): State<Api>,
    Path(p): Path<RolePath>,
) -> Result<Response, ApiError> {
    let master = role(&p)?;
    api.control(CtlRequest::StopDaemon { master }, "sync daemon stopped")
        .await
}

/// Withdraw every VIP from the BGP daemon and keep forwarding (`rvsadm --drain`).
#[utoipa::path(post, path = "/api/v1/drain", tag = "director", request_body = Option<DrainBody>,
    responses((status = 200, body = Done), Failures))]
pub(crate) async fn drain(State(api): State<Api>, raw: RawBody) -> Result<Response, ApiError> {
    let b: DrainBody = body(&raw, true)?;
    let grace_ms = u64::from(b.grace_seconds.unwrap_or(0)) * 1000;
    api.control(CtlRequest::Drain { grace_ms }, "draining")
        .await
}

/// Announce the VIPs again (`rvsadm --undrain`).
#[utoipa::path(post, path = "/api/v1/undrain", tag = "director",
    responses((status = 200, body = Done), Failures))]
pub(crate) async fn undrain(State(api): State<Api>) -> Result<Response, ApiError> {
    api.control(CtlRequest::Undrain, "announcing").await
}

/// Filters and paging of the connection list.
#[derive(Deserialize, IntoParams, Default)]
#[into_params(parameter_in = Query)]
pub(crate) struct ConnQuery {
    /// Connections per page, 1..=10000 (default 100).
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page: where in the table the
    /// next page starts (a walk from the first page to the last lists
    /// every connection that lives throughout it once).
    pub cursor: Option<String>,
    /// Only this service's (an address service id).
    pub service: Option<String>,
    /// Only this client address's.
    pub client: Option<String>,
    /// Only connections in this state (`ESTABLISHED`, ...; any case).
    pub state: Option<String>,
}

/// The connection table, filtered and paged.
#[utoipa::path(get, path = "/api/v1/connections", tag = "reads", params(ConnQuery),
    responses((status = 200, body = ConnPage), Failures))]
pub(crate) async fn connections(State(api): State<Api>, uri: Uri) -> Result<Response, ApiError> {
    let q: ConnQuery = query(&uri)?;
    let limit = match q.limit.as_deref() {
        None => 100,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(|| ApiError::field("limit", format!("`{l}`: 1 to 10000")))?,
    };
    let start = match q.cursor.as_deref() {
        None => 0,
        Some(c) => c.parse::<usize>().map_err(|_| {
            ApiError::field("cursor", format!("`{c}` is not a cursor this API gave"))
        })?,
    };
    let service = match q.service.as_deref() {
        None => None,
        Some(s) => match ids::parse_service(s, "service")? {
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => Some((protocol.name(), addr, port)),
            ServiceKey::Fwmark { .. } => {
                return Err(ApiError::field(
                    "service",
                    "connections are filtered by address services only",
                ));
            }
        },
    };
    let client = q
        .client
        .as_deref()
        .map(|c| {
            c.parse::<IpAddr>()
                .map_err(|_| ApiError::field("client", format!("`{c}` is not an IP address")))
        })
        .transpose()?;
    let state = q.state;
    let filtered = service.is_some() || client.is_some() || state.is_some();
    let keep = Box::new(move |c: &rvs_ipvsadm::snapshot::ConnSnap| {
        service.is_none_or(|(p, a, port)| c.protocol == p && c.vaddr == a && c.vport == port)
            && client.is_none_or(|a| c.caddr == a)
            && state
                .as_deref()
                .is_none_or(|s| c.state.eq_ignore_ascii_case(s))
    });
    let page = api
        .d
        .ask(|reply| crate::handle::Msg::ApiConns {
            from: start,
            limit,
            keep,
            reply,
        })
        .await
        .ok_or_else(ApiError::stopping)?;
    Ok(axum::Json(ConnPage {
        connections: page.conns.iter().map(ConnView::of).collect(),
        next_cursor: page.next.map(|n| n.to_string()),
        total: (!filtered).then_some(page.len),
    })
    .into_response())
}

/// VRRP instances: state and priority.
#[utoipa::path(get, path = "/api/v1/vrrp", tag = "reads",
    responses((status = 200, body = Vec<VrrpView>), Failures))]
pub(crate) async fn vrrp(State(api): State<Api>) -> Result<Response, ApiError> {
    let snap = api.d.fresh().await;
    let v: Vec<VrrpView> = snap
        .live
        .vrrp
        .lock()
        .map(|m| {
            m.iter()
                .map(|(name, (state, priority))| VrrpView {
                    name: name.clone(),
                    state: format!("{state:?}").to_ascii_uppercase(),
                    priority: *priority,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(axum::Json(v).into_response())
}

/// The VIP announcement (`rvsadm -L --announce`).
#[utoipa::path(get, path = "/api/v1/announce", tag = "reads",
    responses((status = 200, body = serde_json::Value), Failures))]
pub(crate) async fn announce(State(api): State<Api>) -> Result<Response, ApiError> {
    let snap = api.d.fresh().await;
    Ok(axum::Json(&*snap.announce).into_response())
}

/// The health checkers' state (`rvsadm -L --checks`).
#[utoipa::path(get, path = "/api/v1/checks", tag = "reads",
    responses((status = 200, body = serde_json::Value), Failures))]
pub(crate) async fn checks(State(api): State<Api>) -> Result<Response, ApiError> {
    let snap = api.d.fresh().await;
    Ok(json(snap.checks.to_string()))
}

/// `?conns=1` adds the connection table.
#[derive(Deserialize, IntoParams, Default)]
#[into_params(parameter_in = Query)]
pub(crate) struct StateQuery {
    /// `1`: with the connection table.
    pub conns: Option<String>,
}

/// The whole state as `rvsadm -L` reads it (QUIC-LB keys as fingerprints).
#[utoipa::path(get, path = "/api/v1/state", tag = "reads", params(StateQuery),
    responses((status = 200, body = serde_json::Value), Failures))]
pub(crate) async fn state(State(api): State<Api>, uri: Uri) -> Result<Response, ApiError> {
    let q: StateQuery = query(&uri)?;
    let conns = q
        .conns
        .as_deref()
        .is_some_and(|c| c != "0" && !c.is_empty());
    if !conns {
        return Ok(json(api.d.fresh().await.api_state()));
    }
    let v = api
        .d
        .ask(|reply| crate::handle::Msg::ApiState { reply })
        .await
        .ok_or_else(ApiError::stopping)?;
    Ok(axum::Json(v).into_response())
}

/// This document.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "reads",
    responses((status = 200, body = serde_json::Value), Failures))]
pub(crate) async fn openapi(State(api): State<Api>) -> Response {
    json(api.doc.get().cloned().unwrap_or_default())
}

/// JSON text as `axum::Json` would answer it.
fn json(text: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::ZeroBody;

    fn raw(s: &str) -> RawBody {
        RawBody(axum::body::Bytes::copy_from_slice(s.as_bytes()))
    }

    /// schemathesis found `POST /api/v1/zero` with `[null]` answered 200:
    /// serde reads a struct from an array of its fields.
    #[test]
    fn only_an_object_is_a_body() {
        for bad in ["[null]", "[]", "null", "1", "\"x\"", " [\"svc\"]"] {
            let e = body::<ZeroBody>(&raw(bad), true).expect_err(bad);
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
        assert!(body::<ZeroBody>(&raw(""), true).is_ok());
        assert!(body::<ZeroBody>(&raw(" {} "), true).is_ok());
        assert!(required::<ZeroBody>(&raw("")).is_err());
    }
}
