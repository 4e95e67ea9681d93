//! C library number and address parsing, as ipvsadm relies on it.
//!
//! ipvsadm validates numbers with `strtol(s, &end, 10)` and requires the
//! whole string to be consumed (`string_to_number` in ipvsadm.c), reads
//! IPv4 addresses and netmasks with glibc's `inet_aton` (which accepts
//! `10.1`, `0x0a.0.0.1`, octal parts and trailing whitespace) and IPv6
//! netmasks with `atoi`. Reproducing those exactly is what makes
//! `rvsadm` accept and refuse the same arguments as `ipvsadm`.

use std::net::Ipv4Addr;

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What strtol and atoi skip before the digits: leading C whitespace, then
/// at most one sign. Returns the index of the first byte after them and
/// whether the sign was `-`.
fn skip_space_and_sign(b: &[u8]) -> (usize, bool) {
    let mut i = 0;
    while i < b.len() && is_c_space(b[i]) {
        i += 1;
    }
    let neg = i < b.len() && b[i] == b'-';
    if i < b.len() && (b[i] == b'+' || neg) {
        i += 1;
    }
    (i, neg)
}

/// `strtol(s, &end, 10)` followed by ipvsadm's checks: something was
/// parsed, nothing is left over, no `ERANGE`. Leading C whitespace and one
/// sign are accepted, as strtol does.
pub(crate) fn strtol_full(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let (mut i, neg) = skip_space_and_sign(b);
    let start = i;
    let mut v: i64 = 0;
    let mut overflow = false;
    while i < b.len() && b[i].is_ascii_digit() {
        let d = i64::from(b[i] - b'0');
        match v.checked_mul(10).and_then(|x| {
            if neg {
                x.checked_sub(d)
            } else {
                x.checked_add(d)
            }
        }) {
            Some(x) => v = x,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start || i != b.len() || overflow {
        return None;
    }
    Some(v)
}

/// ipvsadm's `string_to_number(s, min, max)`: the value if it parses fully
/// and lies in `min..=max`.
pub(crate) fn string_to_number(s: &str, min: i64, max: i64) -> Option<i64> {
    strtol_full(s).filter(|n| (min..=max).contains(n))
}

/// C `atoi`: leading whitespace, optional sign, digits, garbage ignored;
/// 0 when nothing parses. Saturates instead of overflowing (C is undefined).
pub(crate) fn atoi(s: &str) -> i64 {
    let b = s.as_bytes();
    let (mut i, neg) = skip_space_and_sign(b);
    let mut v: i64 = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        v = v.saturating_mul(10).saturating_add(i64::from(b[i] - b'0'));
        i += 1;
    }
    if neg { -v } else { v }
}

/// glibc `inet_aton`: 1 to 4 dot-separated parts, each decimal, octal
/// (leading `0`) or hex (`0x`); the last part fills the remaining bytes;
/// parsing stops successfully at the first whitespace character.
pub(crate) fn inet_aton(s: &str) -> Option<Ipv4Addr> {
    let b = s.as_bytes();
    let mut parts: [u32; 4] = [0; 4];
    let mut n = 0usize;
    let mut i = 0usize;
    loop {
        // Each part must start with a digit.
        if i >= b.len() || !b[i].is_ascii_digit() {
            return None;
        }
        let mut base = 10u32;
        if b[i] == b'0' {
            i += 1;
            if i < b.len() && (b[i] == b'x' || b[i] == b'X') {
                base = 16;
                i += 1;
            } else {
                base = 8;
            }
        }
        let mut val: u64 = 0;
        while i < b.len() {
            let c = b[i];
            let d = match c {
                b'0'..=b'9' if base != 8 || c < b'8' => u64::from(c - b'0'),
                b'a'..=b'f' if base == 16 => u64::from(c - b'a' + 10),
                b'A'..=b'F' if base == 16 => u64::from(c - b'A' + 10),
                _ => break,
            };
            val = val * u64::from(base) + d;
            if val > u64::from(u32::MAX) {
                return None;
            }
            i += 1;
        }
        if n >= 4 {
            return None;
        }
        parts[n] = u32::try_from(val).ok()?;
        n += 1;
        if i < b.len() && b[i] == b'.' {
            if n >= 4 {
                return None;
            }
            i += 1;
            continue;
        }
        break;
    }
    if i < b.len() && !(b[i].is_ascii() && is_c_space(b[i])) {
        return None;
    }
    let v = match n {
        1 => parts[0],
        2 => {
            if parts[0] > 0xff || parts[1] > 0x00ff_ffff {
                return None;
            }
            (parts[0] << 24) | parts[1]
        }
        3 => {
            if parts[0] > 0xff || parts[1] > 0xff || parts[2] > 0xffff {
                return None;
            }
            (parts[0] << 24) | (parts[1] << 16) | parts[2]
        }
        _ => {
            if parts.iter().any(|&p| p > 0xff) {
                return None;
            }
            (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]
        }
    };
    Some(Ipv4Addr::from(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtol_like_c() {
        assert_eq!(strtol_full("80"), Some(80));
        assert_eq!(strtol_full(" +80"), Some(80));
        assert_eq!(strtol_full("-0"), Some(0));
        assert_eq!(strtol_full(""), None);
        assert_eq!(strtol_full("80 "), None);
        assert_eq!(strtol_full("0x10"), None);
        assert_eq!(strtol_full("99999999999999999999"), None);
        assert_eq!(string_to_number("65536", 0, 65535), None);
        assert_eq!(string_to_number("65535", 0, 65535), Some(65535));
    }

    #[test]
    fn atoi_like_c() {
        assert_eq!(atoi("64abc"), 64);
        assert_eq!(atoi("abc"), 0);
        assert_eq!(atoi(" -3"), -3);
    }

    #[test]
    fn inet_aton_like_glibc() {
        assert_eq!(inet_aton("10.1.2.3"), Some(Ipv4Addr::new(10, 1, 2, 3)));
        assert_eq!(inet_aton("10.1"), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(inet_aton("10.1.2"), Some(Ipv4Addr::new(10, 1, 0, 2)));
        assert_eq!(inet_aton("64"), Some(Ipv4Addr::new(0, 0, 0, 64)));
        assert_eq!(inet_aton("0x7f.1"), Some(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(inet_aton("010.0.0.1"), Some(Ipv4Addr::new(8, 0, 0, 1)));
        assert_eq!(inet_aton("1.2.3.4 junk"), Some(Ipv4Addr::new(1, 2, 3, 4)));
        assert_eq!(inet_aton("1.2.3.256"), None);
        assert_eq!(inet_aton("1..2"), None);
        assert_eq!(inet_aton("1.2.3.4.5"), None);
        assert_eq!(inet_aton("08"), None);
        assert_eq!(inet_aton("host"), None);
        assert_eq!(inet_aton(""), None);
    }
}
