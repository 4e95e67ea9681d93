//! Per-packet cost of the balancer's side: `Router::decide` on a short-header
//! datagram (header parse + server ID decode) for each CID form, beside the
//! header parse alone, in one run.
//!
//! `cargo bench -p rvs-quiclb --bench decode`

use criterion::{Criterion, criterion_group, criterion_main};
use rvs_quiclb::{Codec, LbConfig, Router, header};
use std::hint::black_box;

const KEY: &str = "8f95f09245765f80256934e50c66207f";

fn datagram(codec: &Codec) -> Vec<u8> {
    let sid = vec![0x5a; codec.config().server_id_len()];
    let nonce = vec![0xa5; codec.config().nonce_len()];
    let cid = codec.encode(&sid, &nonce, 0).unwrap();
    let mut p = vec![0x41];
    p.extend_from_slice(cid.as_bytes());
    p.extend_from_slice(&[0u8; 1200]);
    p
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("quic_lb_decide");
    let forms = [
        ("plaintext sid=2 nonce=6", "sid=2,nonce=6".to_string()),
        (
            "single-pass sid=2 nonce=14",
            format!("sid=2,nonce=14,key={KEY}"),
        ),
        (
            "four-pass 3 passes sid=2 nonce=6",
            format!("sid=2,nonce=6,key={KEY}"),
        ),
        (
            "four-pass 4 passes sid=6 nonce=4",
            format!("sid=6,nonce=4,key={KEY}"),
        ),
    ];
    let plain = Codec::new("sid=2,nonce=6".parse::<LbConfig>().unwrap());
    let p = datagram(&plain);
    g.bench_function("header parse only (9-octet DCID)", |b| {
        b.iter(|| header::parse(black_box(&p), 9).map(|h| h.dcid().len()))
    });
    for (name, text) in forms {
        let codec = Codec::new(text.parse::<LbConfig>().unwrap());
        let p = datagram(&codec);
        let mut router = Router::new();
        router.insert(codec);
        g.bench_function(name, |b| b.iter(|| router.decide(black_box(&p)).is_ok()));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
