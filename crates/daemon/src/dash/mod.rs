//! The live dashboard on the HTTP endpoint: `GET /`, one page whose HTML,
//! CSS and JavaScript are built into the binary (nothing is fetched at run
//! time: no CDN, no framework, no build step), and `GET /api/v1/events`, a
//! Server-Sent Events stream of what the page shows.
//!
//! One task per daemon (the pump, running while at least one stream is
//! open) waits for the owner's next change ([`DaemonHandle::changes`]: the
//! one-second tick, a health-check step, a command), takes the fresh
//! [`Snapshot`] and publishes one event's data; every stream sends each
//! published event. So N open pages cost one rendering per change, at most
//! one per [`MIN_GAP`], and an event goes out at least every [`MAX_GAP`]
//! even when nothing changed. A health check that turns a real server up
//! or down ([`crate::handle::Changes::urgent`]) does not wait out
//! [`MIN_GAP`]: its event goes out at once (at most one per
//! [`URGENT_GAP`]), so a failing real server turns red on the page within
//! milliseconds of the check that failed, not a quarter of a second later.
//! At most [`MAX_STREAMS`] streams are open at once; one more is answered
//! 503.
//!
//! The page's writes (drain, undrain, weight) go to the REST API's routes
//! with the bearer token the user typed in (kept in the tab's
//! `sessionStorage`); this module serves no write.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::handle::{DaemonHandle, Snapshot};
use crate::metrics::{Family, Value};

/// At most this many event streams are open at once (each holds a
/// connection and a task's worth of memory); one more is answered 503.
pub const MAX_STREAMS: usize = 64;

/// Events are at least this far apart (a burst of changes, say a thousand
/// API writes a second, renders the snapshot four times a second, not a
/// thousand).
const MIN_GAP: Duration = Duration::from_millis(250);

/// Urgent events ([`crate::handle::Changes::urgent`]) are at least this
/// far apart (a farm of flapping real servers cannot make the pump render
/// the snapshot more than forty times a second).
const URGENT_GAP: Duration = Duration::from_millis(25);

/// An event goes out at least this often, changed or not (the page's
/// sparklines advance, and the page knows the stream is alive).
const MAX_GAP: Duration = Duration::from_secs(1);

const INDEX: &str = include_str!("assets/index.html");
const CSS: &str = include_str!("assets/dash.css");
const JS: &str = include_str!("assets/dash.js");

/// The page may load its own script and style and talk to its own origin,
/// nothing else (and nothing inline).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   img-src 'self'; connect-src 'self'; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// The event streams' shared state.
struct Hub {
    daemon: DaemonHandle,
    /// One permit per open stream.
    streams: Arc<Semaphore>,
    /// The last event's data (`None` before the first).
    latest: watch::Sender<Option<Arc<str>>>,
    /// Whether the pump runs; taken with the subscription, so that a new
    /// stream either finds it running or starts it.
    pumping: Mutex<bool>,
}

impl Hub {
    /// A receiver of the events, starting the pump if it does not run.
    fn subscribe(self: &Arc<Self>) -> watch::Receiver<Option<Arc<str>>> {
        let mut pumping = self.pumping.lock().unwrap_or_else(PoisonError::into_inner);
        let mut rx = self.latest.subscribe();
        // The last event, if any, is the stream's first.
        rx.mark_changed();
        if !*pumping {
            *pumping = true;
            tokio::spawn(pump(self.clone()));
        }
        rx
    }

    /// Whether the pump should stop (no stream listens); if so it is
    /// marked stopped under the same lock [`Hub::subscribe`] takes.
    fn idle(&self) -> bool {
        let mut pumping = self.pumping.lock().unwrap_or_else(PoisonError::into_inner);
        if self.latest.receiver_count() == 0 {
            *pumping = false;
            return true;
        }
        false
    }
}

/// Publish an event per change of the owner (at most one per [`MIN_GAP`],
/// or per [`URGENT_GAP`] for urgent ones; at least one per [`MAX_GAP`])
/// while any stream listens.
async fn pump(hub: Arc<Hub>) {
    let mut changes = hub.daemon.changes();
    while !hub.idle() {
        let seen = *changes.borrow_and_update();
        let snap = hub.daemon.fresh().await;
        hub.latest.send_replace(Some(Arc::from(payload(&snap))));
        tokio::time::sleep(URGENT_GAP).await;
        // An urgent change since `seen` cuts the gap short.
        let cut = tokio::select! {
            () = tokio::time::sleep(MIN_GAP - URGENT_GAP) => false,
            () = change_after(&mut changes, |c| c.urgent > seen.urgent) => true,
        };
        if cut {
            continue;
        }
        // The next change, or the longest gap.
        let next = change_after(&mut changes, |c| c.generation > seen.generation);
        let _ = tokio::time::timeout(MAX_GAP - MIN_GAP, next).await;
    }
}

/// Once the owner's changes are as `wanted` (at once if they are); never
/// when the owner is gone (rvsd stopping: the pump's longest gap each
/// time).
async fn change_after(
    changes: &mut tokio::sync::watch::Receiver<crate::handle::Changes>,
    wanted: impl Fn(&crate::handle::Changes) -> bool,
) {
    loop {
        if wanted(&changes.borrow_and_update()) {
            return;
        }
        if changes.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// One event's data: the page's whole view, as JSON. `state` is
/// `/api/v1/state` (without connections), `checks` is `/api/v1/checks`,
/// `vrrp` each instance's state and priority, `plane` the data plane's
/// own counters (drops, refusals, the SYN-flood guard) summed over their
/// labels, `sync` the sync daemons ([`crate::sync::SyncDaemons::view`]).
fn payload(s: &Snapshot) -> String {
    format!(
        r#"{{"generation":{},"state":{},"checks":{},"vrrp":{},"plane":{},"sync":{}}}"#,
        s.generation,
        s.api_state(),
        s.checks,
        vrrp(&s.live.vrrp),
        plane(&crate::metrics::planes(&s.live)),
        s.sync,
    )
}

/// Each VRRP instance as `{"instance", "state", "priority"}`, in name order.
fn vrrp(status: &crate::vrrp::Status) -> serde_json::Value {
    use rvs_core::vrrp::State;
    let st = status.lock().unwrap_or_else(PoisonError::into_inner);
    st.iter()
        .map(|(name, (s, prio))| {
            let state = match s {
                State::Init => "INIT",
                State::Backup => "BACKUP",
                State::Master => "MASTER",
                State::Fault => "FAULT",
                State::Stopped => "STOPPED",
            };
            serde_json::json!({ "instance": name, "state": state, "priority": prio })
        })
        .collect()
}

/// The data planes' counter and gauge families as `{name: value}`, each
/// summed over its samples (per-service labels).
fn plane(families: &[Family]) -> serde_json::Value {
    families
        .iter()
        .map(|f| {
            let total: u64 = f
                .samples
                .iter()
                .map(|s| match s.value {
                    Value::Int(v) => v,
                    Value::Histogram { count, .. } => count,
                })
                .fold(0, u64::saturating_add);
            (f.name.to_owned(), serde_json::Value::from(total))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// `GET /api/v1/events`: a stream of `state` events ([`payload`]), or 503
/// when [`MAX_STREAMS`] are open.
async fn events(State(hub): State<Arc<Hub>>) -> Response {
    let Ok(permit) = hub.streams.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "5")],
            format!("at most {MAX_STREAMS} event streams at once\n"),
        )
            .into_response();
    };
    let rx = hub.subscribe();
    let stream = futures_util::stream::unfold((rx, permit), next_event);
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The stream's next event: the next published data. The permit goes with
/// the stream (a closed connection drops it).
async fn next_event(
    (mut rx, permit): (watch::Receiver<Option<Arc<str>>>, OwnedSemaphorePermit),
) -> Option<(
    Result<Event, Infallible>,
    (watch::Receiver<Option<Arc<str>>>, OwnedSemaphorePermit),
)> {
    loop {
        rx.changed().await.ok()?;
        let data = rx.borrow_and_update().clone();
        if let Some(data) = data {
            let ev = Event::default().event("state").data(&*data);
            return Some((Ok(ev), (rx, permit)));
        }
    }
}

/// An embedded asset with its type; the page also with its policy.
fn asset(kind: &'static str, body: &'static str) -> Response {
    let mut r = ([(header::CONTENT_TYPE, kind)], body).into_response();
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if kind.starts_with("text/html") {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
    }
    r
}

/// The dashboard's routes (`/`, its two assets under `/dash/`, and
/// `/api/v1/events`), for [`crate::http::router`] to merge.
pub fn router<S: Clone + Send + Sync + 'static>(d: &DaemonHandle) -> Router<S> {
    let (latest, _) = watch::channel(None);
    let hub = Arc::new(Hub {
        daemon: d.clone(),
        streams: Arc::new(Semaphore::new(MAX_STREAMS)),
        latest,
        pumping: Mutex::new(false),
    });
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/dash/dash.css",
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .route(
            "/dash/dash.js",
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
        // The browser asks for it; answered so that it logs no error.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/api/v1/events", get(events))
        .with_state(hub)
}

#[cfg(test)]
mod tests;
