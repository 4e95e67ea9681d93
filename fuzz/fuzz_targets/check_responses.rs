//! The health-check probes' parsers of peer bytes must never panic: the HTTP
//! response head parser and the whole response reader (chunked,
//! Content-Length, read-to-close, digest), the SMTP dialogue, the DNS
//! response judge and the UDP reply matcher. Cross-checks: a parsed head's length stays within the
//! input; a complete head whose status is outside the accepted range is
//! reported as that status by the reader; datagrams shorter than a DNS
//! header are ignored.
#![no_main]
use std::cell::RefCell;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use rvs_check::probe::dns::{Verdict, judge};
use rvs_check::probe::http::{parse_head, read_response};
use rvs_check::probe::smtp::dialogue;
use rvs_check::probe::udp::reply_matches;
use rvs_check::probe::{DnsType, Failure, UrlSpec};

thread_local! {
    static RT: RefCell<tokio::runtime::Runtime> = RefCell::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime"),
    );
}

fuzz_target!(|data: &[u8]| {
    let head = parse_head(data);
    if let Ok(Some(h)) = &head {
        assert!(h.len <= data.len());
    }
    for digest in [None, Some("d41d8cd98f00b204e9800998ecf8427e".to_string())] {
        let url = UrlSpec {
            path: "/".into(),
            status: vec![200..=299],
            digest,
            virtualhost: None,
        };
        let r = RT.with(|rt| {
            rt.borrow()
                .block_on(read_response(data, &url, Duration::from_secs(1)))
        });
        if let Ok(Some(h)) = &head
            && !(200..=299).contains(&h.status)
        {
            assert_eq!(r, Err(Failure::Status(h.status)));
        }
    }
    let _ = RT.with(|rt| {
        rt.borrow().block_on(dialogue(
            tokio::io::join(data, tokio::io::sink()),
            "fuzz.example",
            Duration::from_secs(1),
        ))
    });
    let id = u16::from_be_bytes([
        data.first().copied().unwrap_or(0),
        data.get(1).copied().unwrap_or(0),
    ]);
    for require in [false, true] {
        let v = judge(data, id, DnsType::A, require);
        if data.len() < 12 {
            assert_eq!(v, Verdict::Ignore);
        }
    }
    let pattern: Vec<Option<u8>> = data
        .iter()
        .take(8)
        .map(|&b| if b & 1 == 0 { Some(b) } else { None })
        .collect();
    let _ = reply_matches(data, &pattern, 0, 255);
});
