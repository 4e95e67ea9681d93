//! DNS_CHECK against a tiny DNS responder built with hickory-proto.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record};
use rvs_check::probe::{DnsType, Failure, ProbeSpec, run};
use tokio::net::UdpSocket;

use super::target;

/// Answers by name: `ok.test.` A 192.0.2.1 (after a decoy datagram with a
/// wrong id and a non-response), `nx.test.` NXDOMAIN, `empty.test.`
/// NOERROR without answers, `servfail.test.` SERVFAIL, `slow.test.`
/// nothing.
async fn responder() -> SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        // Bounded: a test sends a handful of queries.
        for _ in 0..64 {
            let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
                return;
            };
            let Ok(q) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let Some(query) = q.queries.first().cloned() else {
                continue;
            };
            let name = query.name().to_ascii();
            let mut resp = Message::response(q.metadata.id, OpCode::Query);
            resp.metadata.recursion_desired = q.metadata.recursion_desired;
            resp.add_query(query.clone());
            match name.as_str() {
                "ok.test." => {
                    let mut decoy = Message::response(q.metadata.id.wrapping_add(1), OpCode::Query);
                    decoy.metadata.response_code = ResponseCode::ServFail;
                    let _ = sock.send_to(&decoy.to_vec().unwrap(), peer).await;
                    // The query echoed back (QR clear) must be ignored too.
                    let _ = sock.send_to(&buf[..n], peer).await;
                    resp.add_answer(Record::from_rdata(
                        query.name().clone(),
                        60,
                        RData::A(A(Ipv4Addr::new(192, 0, 2, 1))),
                    ));
                }
                "nx.test." => resp.metadata.response_code = ResponseCode::NXDomain,
                "servfail.test." => resp.metadata.response_code = ResponseCode::ServFail,
                "empty.test." => {}
                _ => continue,
            }
            let _ = sock.send_to(&resp.to_vec().unwrap(), peer).await;
        }
    });
    addr
}

fn dns(qtype: DnsType, name: &str, require_answer: bool) -> ProbeSpec {
    ProbeSpec::Dns {
        qtype,
        name: name.into(),
        require_answer,
    }
}

#[tokio::test]
async fn dns_answer_passes_after_ignoring_decoys() {
    let addr = responder().await;
    let r = run(&dns(DnsType::A, "ok.test", true), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Ok(()));
    let r = run(&dns(DnsType::A, "ok.test.", false), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Ok(()));
}

#[tokio::test]
async fn dns_nxdomain_and_servfail_fail() {
    let addr = responder().await;
    let r = run(&dns(DnsType::A, "nx.test", false), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Err(Failure::Rcode("NXDOMAIN".into())));
    let f = r.outcome.unwrap_err();
    assert_eq!(
        (f.kind(), f.to_string().as_str()),
        ("rcode", "dns NXDOMAIN")
    );
    let r = run(
        &dns(DnsType::Soa, "servfail.test", false),
        &target(addr, 1000),
    )
    .await;
    assert_eq!(r.outcome, Err(Failure::Rcode("SERVFAIL".into())));
}

#[tokio::test]
async fn dns_no_answer_only_when_required() {
    let addr = responder().await;
    // keepalived's rule: NOERROR is enough.
    let r = run(&dns(DnsType::A, "empty.test", false), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Ok(()));
    let r = run(&dns(DnsType::A, "empty.test", true), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Err(Failure::NoAnswer));
    // An answer of another type does not count.
    let r = run(&dns(DnsType::Aaaa, "ok.test", true), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Err(Failure::NoAnswer));
}

#[tokio::test]
async fn dns_timeout_and_refused() {
    let addr = responder().await;
    let r = run(&dns(DnsType::A, "slow.test", false), &target(addr, 300)).await;
    assert_eq!(r.outcome, Err(Failure::Timeout));
    assert!(r.latency >= Duration::from_millis(300) && r.latency < Duration::from_secs(2));
    let closed = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    let r = run(&dns(DnsType::A, "ok.test", false), &target(closed, 1000)).await;
    assert_eq!(r.outcome, Err(Failure::Refused));
}
