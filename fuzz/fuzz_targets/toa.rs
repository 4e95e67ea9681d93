//! The TOA option walker, decoder and builder under arbitrary bytes.
//! Nothing panics; a TOA `find` returns encodes back to the bytes it came
//! from; `append` of a TOA decoded or made from the input yields options in
//! which `find` sees exactly that TOA, 4-aligned and within 40 bytes, and the
//! options before it unchanged.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use rvs_wire::toa::{self, Toa};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    // The walk over every option: offsets increase and stay in bounds.
    let mut last = None;
    for o in toa::options(rest) {
        let Ok(o) = o else { break };
        assert!(o.offset + o.bytes.len() <= rest.len());
        assert!(last.is_none_or(|l| o.offset > l));
        assert_eq!(rest[o.offset], o.kind);
        last = Some(o.offset);
    }
    if let Ok(Some(t)) = toa::find(rest) {
        let b = t.to_bytes();
        let at = rest
            .windows(b.len())
            .position(|w| w == b.as_slice())
            .expect("a found TOA's bytes are in the input");
        assert_eq!(Toa::from_option(&rest[at..at + b.len()]), Ok(t));
    }
    let _ = Toa::from_option(rest);
    // A TOA made from the first bytes of the input, appended to the rest.
    let (addr, opts) = if sel & 1 == 0 {
        if rest.len() < 6 {
            return;
        }
        let ip = Ipv4Addr::new(rest[0], rest[1], rest[2], rest[3]);
        let port = u16::from_be_bytes([rest[4], rest[5]]);
        (SocketAddr::new(IpAddr::V4(ip), port), &rest[6..])
    } else {
        if rest.len() < 18 {
            return;
        }
        let mut a = [0u8; 16];
        a.copy_from_slice(&rest[..16]);
        let port = u16::from_be_bytes([rest[16], rest[17]]);
        (SocketAddr::new(IpAddr::V6(Ipv6Addr::from(a)), port), &rest[18..])
    };
    let t = Toa::new(addr);
    if let Ok(out) = toa::append(opts, &t) {
        assert!(out.len() <= toa::MAX_OPTIONS);
        assert_eq!(out.len() % 4, 0);
        assert_eq!(toa::find(&out), Ok(Some(t)));
        let tail = out.len() - usize::from(t.wire_len());
        assert_eq!(tail % 4, 0);
        assert!(opts.starts_with(out[..tail].trim_ascii_end_nop()));
    }
});

/// Trailing NOP padding removed (what `append` adds before the TOA).
trait TrimNop {
    fn trim_ascii_end_nop(&self) -> &[u8];
}

impl TrimNop for [u8] {
    fn trim_ascii_end_nop(&self) -> &[u8] {
        let mut end = self.len();
        while end > 0 && self[end - 1] == 1 {
            end -= 1;
        }
        &self[..end]
    }
}
