//! DNS_CHECK against a tiny DNS responder built with hickory-proto.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record};
use rvs_check::probe::{DnsType, Failure, ProbeSpec, run};

use super::{closed_udp_port, serve_udp, target};

/// Answers by name: `ok.test.` A 192.0.2.1 (after a decoy datagram with a
/// wrong id and a non-response), `nx.test.` NXDOMAIN, `empty.test.`
/// NOERROR without answers, `servfail.test.` SERVFAIL, `slow.test.`
/// nothing.
async fn responder() -> SocketAddr {
    // Bounded: a test sends a handful of queries.
    serve_udp(64, |datagram| {
        let Ok(q) = Message::from_vec(datagram) else {
            return vec![];
        };
        let Some(query) = q.queries.first().cloned() else {
            return vec![];
        };
        let name = query.name().to_ascii();
        let mut resp = Message::response(q.metadata.id, OpCode::Query);
        resp.metadata.recursion_desired = q.metadata.recursion_desired;
        resp.add_query(query.clone());
        let mut out = vec![];
        match name.as_str() {
            "ok.test." => {
                let mut decoy = Message::response(q.metadata.id.wrapping_add(1), OpCode::Query);
                decoy.metadata.response_code = ResponseCode::ServFail;
                out.push(decoy.to_vec().unwrap());
                // The query echoed back (QR clear) must be ignored too.
                out.push(datagram.to_vec());
                resp.add_answer(Record::from_rdata(
                    query.name().clone(),
                    60,
                    RData::A(A(Ipv4Addr::new(192, 0, 2, 1))),
                ));
            }
            "nx.test." => resp.metadata.response_code = ResponseCode::NXDomain,
            "servfail.test." => resp.metadata.response_code = ResponseCode::ServFail,
            "empty.test." => {}
            _ => return vec![],
        }
        out.push(resp.to_vec().unwrap());
        out
    })
    .await
}

fn dns(qtype: DnsType, name: &str, require_answer: bool) -> ProbeSpec {
    ProbeSpec::Dns {
        qtype,
        name: name.into(),
        require_answer,
    }
}

/// The outcome of a DNS_CHECK of `name` against `addr` (1 s timeout).
async fn query(
    addr: SocketAddr,
    qtype: DnsType,
    name: &str,
    require_answer: bool,
) -> Result<(), Failure> {
    run(&dns(qtype, name, require_answer), &target(addr, 1000))
        .await
        .outcome
}

#[tokio::test]
async fn dns_answer_passes_after_ignoring_decoys() {
    let addr = responder().await;
    assert_eq!(query(addr, DnsType::A, "ok.test", true).await, Ok(()));
    assert_eq!(query(addr, DnsType::A, "ok.test.", false).await, Ok(()));
}

#[tokio::test]
async fn dns_nxdomain_and_servfail_fail() {
    let addr = responder().await;
    let outcome = query(addr, DnsType::A, "nx.test", false).await;
    assert_eq!(outcome, Err(Failure::Rcode("NXDOMAIN".into())));
    let f = outcome.unwrap_err();
    assert_eq!(
        (f.kind(), f.to_string().as_str()),
        ("rcode", "dns NXDOMAIN")
    );
    assert_eq!(
        query(addr, DnsType::Soa, "servfail.test", false).await,
        Err(Failure::Rcode("SERVFAIL".into()))
    );
}

#[tokio::test]
async fn dns_no_answer_only_when_required() {
    let addr = responder().await;
    // keepalived's rule: NOERROR is enough.
    assert_eq!(query(addr, DnsType::A, "empty.test", false).await, Ok(()));
    assert_eq!(
        query(addr, DnsType::A, "empty.test", true).await,
        Err(Failure::NoAnswer)
    );
    // An answer of another type does not count.
    assert_eq!(
        query(addr, DnsType::Aaaa, "ok.test", true).await,
        Err(Failure::NoAnswer)
    );
}

#[tokio::test]
async fn dns_timeout_and_refused() {
    let addr = responder().await;
    let r = run(&dns(DnsType::A, "slow.test", false), &target(addr, 300)).await;
    assert_eq!(r.outcome, Err(Failure::Timeout));
    assert!(r.latency >= Duration::from_millis(300) && r.latency < Duration::from_secs(2));
    let closed = closed_udp_port();
    assert_eq!(
        query(closed, DnsType::A, "ok.test", false).await,
        Err(Failure::Refused)
    );
}
