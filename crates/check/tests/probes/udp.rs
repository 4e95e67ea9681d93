//! UDP_CHECK against a UDP echo, a mute socket and a closed port.

use std::net::SocketAddr;
use std::time::Duration;

use rvs_check::probe::{Failure, ProbeSpec, UdpReply, run};
use tokio::net::UdpSocket;

use super::{closed_udp_port, serve_udp, target};

/// Replies `prefix ++ datagram`; bounded to a handful of datagrams.
async fn echo(prefix: &'static [u8]) -> SocketAddr {
    serve_udp(32, move |datagram| vec![[prefix, datagram].concat()]).await
}

fn udp(payload: &[u8], require_reply: Option<UdpReply>, min: u32, max: u32) -> ProbeSpec {
    ProbeSpec::Udp {
        payload: payload.to_vec(),
        require_reply,
        min_reply: min,
        max_reply: max,
    }
}

#[tokio::test]
async fn udp_reply_matches_pattern() {
    let addr = echo(b"").await;
    let pat = UdpReply::Matching(vec![Some(0xca), None, Some(0xbe)]);
    let r = run(
        &udp(&[0xca, 0xfe, 0xbe, 0xef], Some(pat), 0, 255),
        &target(addr, 1000),
    )
    .await;
    assert_eq!(r.outcome, Ok(()));
    let r = run(&udp(b"x", Some(UdpReply::Any), 0, 255), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Ok(()));
}

#[tokio::test]
async fn udp_reply_mismatch_and_lengths() {
    let addr = echo(b"ERR").await;
    let pat = UdpReply::Matching(vec![Some(b'O'), Some(b'K')]);
    let r = run(&udp(b"ping", Some(pat), 0, 255), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Err(Failure::ReplyMismatch));
    // "ERRping" is 7 bytes: outside 0..=6 fails, inside 7..=7 passes.
    let any_byte = UdpReply::Matching(vec![None]);
    let r = run(
        &udp(b"ping", Some(any_byte.clone()), 0, 6),
        &target(addr, 1000),
    )
    .await;
    assert_eq!(r.outcome, Err(Failure::ReplyMismatch));
    let r = run(
        &udp(b"ping", Some(any_byte.clone()), 8, 255),
        &target(addr, 1000),
    )
    .await;
    assert_eq!(r.outcome, Err(Failure::ReplyMismatch));
    let r = run(&udp(b"ping", Some(any_byte), 7, 7), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Ok(()));
}

#[tokio::test]
async fn udp_port_unreachable_is_refused() {
    let closed = closed_udp_port();
    let r = run(&udp(b"hello", None, 0, 255), &target(closed, 1000)).await;
    assert_eq!(r.outcome, Err(Failure::Refused));
    assert!(r.latency < Duration::from_millis(500));
}

#[tokio::test]
async fn udp_silence_passes_unless_reply_required() {
    let mute = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = mute.local_addr().unwrap();
    let r = run(&udp(b"hello", None, 0, 255), &target(addr, 300)).await;
    assert_eq!(r.outcome, Ok(()));
    assert!(r.latency >= Duration::from_millis(300));
    let r = run(
        &udp(b"hello", Some(UdpReply::Any), 0, 255),
        &target(addr, 300),
    )
    .await;
    assert_eq!(r.outcome, Err(Failure::NoReply));
    drop(mute);
}
