//! The PROXY protocol parser must never panic on any bytes, under the
//! default and a small length limit. Every prefix of the input must agree
//! with the whole: a prefix of a complete header is `Incomplete`, never an
//! error. A complete header re-encodes to bytes that parse back to the same
//! header (CRC32C values aside: they depend on bytes the header does not
//! keep, such as AF_UNIX paths).
#![no_main]
use libfuzzer_sys::fuzz_target;
use rvs_wire::proxy_protocol::{ParseError, Parsed, ProxyHeader, TlvType, parse, parse_with_limit};

fn without_crc_values(mut h: ProxyHeader) -> ProxyHeader {
    for t in &mut h.tlvs {
        if t.kind == TlvType::Crc32c.code() {
            t.value = vec![0; 4];
        }
    }
    h
}

fuzz_target!(|data: &[u8]| {
    let _: Result<Parsed, ParseError> = parse_with_limit(data, 64);
    let Ok(Parsed::Complete { header, consumed }) = parse(data) else {
        return;
    };
    assert!(consumed <= data.len());
    // Trailing application data does not change the verdict.
    assert_eq!(
        parse(&data[..consumed]),
        Ok(Parsed::Complete {
            header: header.clone(),
            consumed
        })
    );
    // Every strict prefix is merely incomplete.
    for k in 0..consumed {
        assert!(
            matches!(parse(&data[..k]), Ok(Parsed::Incomplete { .. })),
            "prefix {k} of a complete header"
        );
    }
    let mut out = Vec::new();
    header
        .emit(&mut out)
        .expect("a parsed header is always encodable");
    assert_eq!(out.len(), header.buffer_len());
    match parse(&out) {
        Ok(Parsed::Complete {
            header: again,
            consumed,
        }) => {
            assert_eq!(consumed, out.len());
            assert_eq!(without_crc_values(again), without_crc_values(header));
        }
        other => panic!("re-encoded header does not parse: {other:?}"),
    }
});
