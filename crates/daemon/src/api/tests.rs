//! The API driven through its router over a daemon with no data plane:
//! the document lists every route, the routes other parts depend on are
//! there, and writes are authenticated, versioned and owner-checked.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use rvs_control::dataplane::NoDataPlane;
use rvs_control::owner::{Change, Owner};
use rvs_control::protocol::Command;
use rvs_control::state::Controller;
use rvs_core::ipvs::IpvsConfig;
use rvs_core::model::{AddrFamily, ServiceConfig};
use tower::ServiceExt;

use super::guard::{Policy, Reads};
use crate::daemon::Daemon;
use crate::handle::DaemonHandle;

fn daemon() -> DaemonHandle {
    let ctl = Controller::new(IpvsConfig::default(), Box::new(NoDataPlane));
    crate::handle::spawn(Daemon::new(ctl, None))
}

fn app(d: &DaemonHandle, writes: bool) -> axum::Router {
    let policy = Policy {
        token: Some(b"t0ken".to_vec()),
        client_ca: false,
        writes,
        reads: Reads::Open,
    };
    crate::http::router(d.clone(), policy, 1_000_000)
}

struct Answer {
    status: StatusCode,
    etag: Option<String>,
    json: serde_json::Value,
    content_type: Option<String>,
}

async fn call(
    app: &axum::Router,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
    headers: &[(&str, &str)],
) -> Answer {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .expect("request");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let etag = resp
        .headers()
        .get(header::ETAG)
        .map(|v| v.to_str().unwrap_or_default().to_owned());
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or_default().to_owned());
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body");
    Answer {
        status,
        etag,
        json: serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        content_type,
    }
}

const AUTH: (&str, &str) = ("authorization", "Bearer t0ken");

/// Create a service.
async fn post_service(
    app: &axum::Router,
    body: &serde_json::Value,
    headers: &[(&str, &str)],
) -> Answer {
    call(
        app,
        Method::POST,
        "/api/v1/services",
        Some(body.clone()),
        headers,
    )
    .await
}

#[tokio::test]
async fn the_document_lists_every_route_and_every_listed_route_is_mounted() {
    let d = daemon();
    let app = app(&d, true);
    let doc = call(&app, Method::GET, "/api/v1/openapi.json", None, &[]).await;
    assert_eq!(doc.status, StatusCode::OK);
    assert_eq!(doc.json["openapi"], "3.1.0");
    let paths = doc.json["paths"].as_object().expect("paths");
    // The routes the dashboard and other clients rely on.
    for (method, path) in [
        ("get", "/api/v1/services"),
        ("post", "/api/v1/services"),
        ("get", "/api/v1/services/{svc}"),
        ("patch", "/api/v1/services/{svc}"),
        ("delete", "/api/v1/services/{svc}"),
        ("get", "/api/v1/services/{svc}/reals"),
        ("post", "/api/v1/services/{svc}/reals"),
        ("get", "/api/v1/services/{svc}/reals/{rs}"),
        ("patch", "/api/v1/services/{svc}/reals/{rs}"),
        ("delete", "/api/v1/services/{svc}/reals/{rs}"),
        ("post", "/api/v1/services/{svc}/reals/{rs}/drain"),
        ("post", "/api/v1/services/{svc}/reals/{rs}/undrain"),
        ("get", "/api/v1/table"),
        ("put", "/api/v1/table"),
        ("post", "/api/v1/zero"),
        ("get", "/api/v1/sync/{role}"),
        ("post", "/api/v1/sync/{role}"),
        ("delete", "/api/v1/sync/{role}"),
        ("post", "/api/v1/drain"),
        ("post", "/api/v1/undrain"),
        ("get", "/api/v1/connections"),
        ("get", "/api/v1/vrrp"),
        ("get", "/api/v1/announce"),
        ("get", "/api/v1/checks"),
        ("get", "/api/v1/state"),
        ("get", "/api/v1/openapi.json"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing from the document"
        );
    }
    // Every operation of the document is served by a handler (an unrouted
    // request gets axum's bare 404/405, without a JSON body).
    let mut n = 0;
    for (path, ops) in paths {
        for method in ops.as_object().expect("operations").keys() {
            let concrete = path
                .replace("{svc}", "tcp-10.9.9.9-80")
                .replace("{rs}", "10.9.9.10-80")
                .replace("{role}", "backup")
                .replace("{laddr}", "10.9.9.11");
            let m = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).expect("method");
            let a = call(&app, m, &concrete, None, &[AUTH]).await;
            assert!(
                a.content_type.as_deref() == Some("application/json"),
                "{method} {path}: {} without a JSON body: not routed?",
                a.status
            );
            n += 1;
        }
    }
    assert!(n >= 30, "{n} operations");
    // And a route not in the document is not served.
    let a = call(&app, Method::GET, "/api/v1/nope", None, &[]).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn writes_are_authenticated_versioned_and_owner_checked() {
    let d = daemon();
    let app = app(&d, true);
    let svc = serde_json::json!({
        "protocol": "tcp", "address": "10.0.0.1", "port": 80, "scheduler": "rr",
        "reals": [{"address": "10.0.0.2", "port": 80, "weight": 3, "forward": "masq"}]
    });
    // No token: 401, nothing created.
    let a = post_service(&app, &svc, &[]).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert_eq!(a.json["code"], "unauthorized");
    let wrong = ("authorization", "Bearer t0keN");
    let a = post_service(&app, &svc, &[wrong]).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    let a = call(&app, Method::GET, "/api/v1/services", None, &[]).await;
    assert_eq!(a.json, serde_json::json!([]));
    // A bad field: 400 naming it, nothing created.
    let mut bad = svc.clone();
    bad["scheduler"] = "nosuch".into();
    let a = post_service(&app, &bad, &[AUTH]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.json["field"], "scheduler");
    let mut bad = svc.clone();
    bad["reals"][0]["weight"] = 70000.into();
    let a = post_service(&app, &bad, &[AUTH]).await;
    assert_eq!(a.json["field"], "weight");
    let a = call(&app, Method::GET, "/api/v1/services", None, &[]).await;
    assert_eq!(a.json, serde_json::json!([]));
    // Created with its real server.
    let a = post_service(&app, &svc, &[AUTH]).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.json);
    assert_eq!(a.json["id"], "tcp-10.0.0.1-80");
    assert_eq!(a.json["owner"], "the HTTP API");
    assert_eq!(a.json["reals"][0]["weight"], 3);
    assert_eq!(a.json["reals"][0]["forward"], "masq");
    let tag = a.etag.expect("an ETag");
    let a = post_service(&app, &svc, &[AUTH]).await;
    assert_eq!(a.status, StatusCode::CONFLICT);
    assert_eq!(a.json["code"], "exists");
    // A bad id names the field.
    let a = call(
        &app,
        Method::GET,
        "/api/v1/services/tcp-10.0.0.1",
        None,
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.json["field"], "svc");
    // If-Match: the current tag passes, then it is stale.
    let path = "/api/v1/services/tcp-10.0.0.1-80";
    let a = call(&app, Method::GET, path, None, &[]).await;
    assert_eq!(a.etag.as_deref(), Some(tag.as_str()));
    // The first PATCH with the tag passes; the same tag is then stale.
    for (patch, want) in [
        (
            serde_json::json!({"scheduler": "wlc", "persistent": 300}),
            StatusCode::OK,
        ),
        (
            serde_json::json!({"scheduler": "sh"}),
            StatusCode::PRECONDITION_FAILED,
        ),
    ] {
        let h = [AUTH, ("if-match", tag.as_str())];
        let a = call(&app, Method::PATCH, path, Some(patch), &h).await;
        assert_eq!(a.status, want, "{}", a.json);
        if want == StatusCode::OK {
            assert_eq!(a.json["scheduler"], "wlc");
            assert_eq!(a.json["persistent"], 300);
        } else {
            assert_eq!(a.json["code"], "precondition_failed");
        }
    }
    let a = call(&app, Method::GET, path, None, &[]).await;
    assert_eq!(
        a.json["scheduler"], "wlc",
        "a refused write changed nothing"
    );
    // Drain keeps the weight; undrain restores it.
    let rs = "/api/v1/services/tcp-10.0.0.1-80/reals/10.0.0.2-80";
    let a = call(&app, Method::POST, &format!("{rs}/drain"), None, &[AUTH]).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(a.json["weight"], 0);
    let a = call(&app, Method::POST, &format!("{rs}/undrain"), None, &[AUTH]).await;
    assert_eq!(a.json["weight"], 3);
    let a = call(&app, Method::POST, &format!("{rs}/undrain"), None, &[AUTH]).await;
    assert_eq!(a.status, StatusCode::CONFLICT);
    // A service the configuration file owns is read-only here.
    let key = super::ids::parse_service("udp-10.0.0.5-53", "svc").expect("id");
    let r = d
        .submit(
            Owner::File,
            Change::Commands {
                commands: vec![Command::AddService {
                    key,
                    config: ServiceConfig::new(AddrFamily::Inet),
                }],
                atomic: true,
            },
        )
        .await;
    assert!(matches!(r, Some(Ok(_))));
    let owned = "/api/v1/services/udp-10.0.0.5-53";
    let a = call(&app, Method::DELETE, owned, None, &[AUTH]).await;
    assert_eq!(a.status, StatusCode::CONFLICT);
    assert_eq!(a.json["code"], "owned");
    assert!(
        a.json["message"]
            .as_str()
            .is_some_and(|m| m.contains("the configuration file")),
        "{}",
        a.json
    );
    // The whole table back as it was read: the file's service is left
    // alone, the API's is kept.
    let t = call(&app, Method::GET, "/api/v1/table", None, &[]).await;
    let a = call(
        &app,
        Method::PUT,
        "/api/v1/table",
        Some(t.json.clone()),
        &[AUTH],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(a.etag, t.etag, "an unchanged table keeps its ETag");
    // Deleting through the API.
    let a = call(&app, Method::DELETE, path, None, &[AUTH]).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let a = call(&app, Method::GET, path, None, &[]).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn writes_are_off_unless_enabled() {
    let d = daemon();
    let app = app(&d, false);
    let a = call(&app, Method::POST, "/api/v1/zero", None, &[AUTH]).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert_eq!(a.json["code"], "writes_disabled");
    let a = call(&app, Method::GET, "/api/v1/services", None, &[]).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.etag.is_some());
}

/// A GET or a POST over a connection whose client certificate rustls
/// verified as `client` (`None`: no certificate): the status.
async fn status_as(
    app: &axum::Router,
    method: Method,
    path: &str,
    client: Option<&str>,
) -> StatusCode {
    let peer = crate::tls::Peer {
        addr: ([127, 0, 0, 1], 40000).into(),
        client: client.map(std::sync::Arc::from),
    };
    let req = Request::builder()
        .method(method)
        .uri(path)
        .extension(axum::extract::ConnectInfo(peer))
        .body(Body::empty())
        .expect("request");
    app.clone().oneshot(req).await.expect("infallible").status()
}

#[tokio::test]
async fn a_client_certificate_authenticates_and_token_reads_close_the_dashboard() {
    let d = daemon();
    let policy = Policy {
        token: None,
        client_ca: true,
        writes: true,
        reads: Reads::Token,
    };
    let app = crate::http::router(d.clone(), policy, 1_000_000);
    let alice = Some("CN=alice");
    // Writes: the certificate, or 401.
    assert_eq!(
        status_as(&app, Method::POST, "/api/v1/zero", None).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        status_as(&app, Method::POST, "/api/v1/zero", alice).await,
        StatusCode::OK
    );
    // Reads (--api-reads token): the API and the dashboard alike.
    for path in ["/api/v1/state", "/", "/dash/dash.js", "/api/v1/events"] {
        assert_eq!(
            status_as(&app, Method::GET, path, None).await,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
    for path in ["/api/v1/state", "/", "/dash/dash.js"] {
        assert_eq!(
            status_as(&app, Method::GET, path, alice).await,
            StatusCode::OK,
            "{path}"
        );
    }
    // The scrape and the liveness probe stay open.
    for path in ["/metrics", "/healthz"] {
        assert_eq!(
            status_as(&app, Method::GET, path, None).await,
            StatusCode::OK
        );
    }
    // With --api-reads open the dashboard is open too.
    let open = crate::http::router(
        d,
        Policy {
            token: Some(b"t0ken".to_vec()),
            client_ca: false,
            writes: true,
            reads: Reads::Open,
        },
        1_000_000,
    );
    assert_eq!(
        status_as(&open, Method::GET, "/", None).await,
        StatusCode::OK
    );
}

/// A real server of the other address family than its service is legal
/// only behind an encapsulating tunnel (rvsadm's check): POST and PATCH of
/// a real server, a service's `reals` and `PUT /api/v1/table` answer 400
/// naming `address` with rvsadm's words, and change nothing.
#[tokio::test]
async fn a_real_server_of_the_other_family_needs_a_tunnel() {
    let d = daemon();
    let app = app(&d, true);
    let svc = serde_json::json!({"protocol": "tcp", "address": "10.0.0.1", "port": 80});
    assert_eq!(
        post_service(&app, &svc, &[AUTH]).await.status,
        StatusCode::CREATED
    );
    let path = "/api/v1/services/tcp-10.0.0.1-80";
    let reals = format!("{path}/reals");
    let before = call(&app, Method::GET, "/api/v1/table", None, &[]).await;
    let refused = |a: &Answer, words: &str| {
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.json);
        assert_eq!(a.json["code"], "invalid_field", "{}", a.json);
        assert_eq!(a.json["field"], "address", "{}", a.json);
        assert!(
            a.json["message"]
                .as_str()
                .is_some_and(|m| m.contains(words)),
            "{}",
            a.json
        );
    };
    let only_tunnels = "Different address family is allowed only for tunneling servers";
    for forward in ["route", "masq", "fullnat"] {
        let rs = serde_json::json!({"address": "2001:db8::2", "port": 80, "forward": forward});
        let a = call(&app, Method::POST, &reals, Some(rs), &[AUTH]).await;
        refused(&a, only_tunnels);
    }
    let opt = serde_json::json!({
        "address": "2001:db8::2", "port": 80, "forward": "tunnel", "tun_type": "opt"
    });
    let a = call(&app, Method::POST, &reals, Some(opt), &[AUTH]).await;
    refused(&a, "not allowed for --tun-type opt");
    // A service created with such a real server is not created.
    let mut v6 = serde_json::json!({"protocol": "tcp", "address": "2001:db8::1", "port": 80});
    v6["reals"] = serde_json::json!([{"address": "10.0.0.2", "port": 80, "forward": "masq"}]);
    refused(&post_service(&app, &v6, &[AUTH]).await, only_tunnels);
    // Nor is a table that holds one.
    let mut table = before.json.clone();
    table["services"][0]["reals"] =
        serde_json::json!([{"address": "2001:db8::3", "port": 80, "forward": "route"}]);
    let a = call(&app, Method::PUT, "/api/v1/table", Some(table), &[AUTH]).await;
    refused(&a, only_tunnels);
    let after = call(&app, Method::GET, "/api/v1/table", None, &[]).await;
    assert_eq!(after.etag, before.etag, "a refused write changed nothing");
    assert_eq!(after.json, before.json);
    // Behind a tunnel it is taken; made anything else, refused again.
    let ipip = serde_json::json!({"address": "2001:db8::2", "port": 80, "forward": "tunnel"});
    let a = call(&app, Method::POST, &reals, Some(ipip), &[AUTH]).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.json);
    let rs = format!("{reals}/2001:db8::2-80");
    let a = call(&app, Method::GET, &rs, None, &[]).await;
    assert_eq!(a.json["forward"], "tunnel", "{}", a.json);
    let patch = serde_json::json!({"forward": "masq"});
    let a = call(&app, Method::PATCH, &rs, Some(patch), &[AUTH]).await;
    refused(&a, only_tunnels);
    let a = call(&app, Method::GET, &rs, None, &[]).await;
    assert_eq!(
        a.json["forward"], "tunnel",
        "the refused PATCH changed nothing"
    );
}
