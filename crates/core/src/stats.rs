//! Traffic counters and the rate estimator behind `ipvsadm --stats/--rate`.

use crate::time::Instant;

/// Cumulative counters of a service, a real server, or the whole director.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Connections scheduled.
    pub conns: u64,
    /// Packets client → server.
    pub inpkts: u64,
    /// Packets server → client (NAT/FULLNAT only: the director sees no
    /// replies for DR/TUN).
    pub outpkts: u64,
    /// Bytes client → server.
    pub inbytes: u64,
    /// Bytes server → client.
    pub outbytes: u64,
}

impl Counters {
    /// Account one inbound packet of `len` bytes.
    #[inline]
    pub fn count_in(&mut self, len: u64) {
        self.inpkts = self.inpkts.wrapping_add(1);
        self.inbytes = self.inbytes.wrapping_add(len);
    }

    /// Account one outbound packet of `len` bytes.
    #[inline]
    pub fn count_out(&mut self, len: u64) {
        self.outpkts = self.outpkts.wrapping_add(1);
        self.outbytes = self.outbytes.wrapping_add(len);
    }

    /// Add another set of counters (e.g. per-CPU counters of a data plane).
    pub fn add(&mut self, other: &Counters) {
        self.conns = self.conns.wrapping_add(other.conns);
        self.inpkts = self.inpkts.wrapping_add(other.inpkts);
        self.outpkts = self.outpkts.wrapping_add(other.outpkts);
        self.inbytes = self.inbytes.wrapping_add(other.inbytes);
        self.outbytes = self.outbytes.wrapping_add(other.outbytes);
    }
}

/// How a QUIC-LB service's datagrams were routed (per service; all zero for
/// a service without QUIC-LB configs). A data plane counts them and reports
/// them to the director with [`crate::ipvs::Ipvs::add_quic_lb_counters`];
/// `rvsadm -Ln --quic-lb` and the metric
/// `rvs_service_quic_lb_packets_total{route=...}` show them.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct QuicLbCounters {
    /// Datagrams routed by the server ID decoded from their connection ID
    /// to the real server that has it.
    pub by_cid: u64,
    /// QUIC datagrams routed by the consistent hash of their DCID: the
    /// connection ID did not decode to a live real server's ID (a
    /// client-chosen Initial DCID, an unknown config rotation, a server ID
    /// no available real server has).
    pub by_fallback: u64,
    /// Datagrams whose QUIC header did not parse (too short, not QUIC):
    /// what the data plane does with them is its own (documented) choice.
    pub undecodable: u64,
}

impl QuicLbCounters {
    /// Add another set of counters (e.g. a data plane's delta).
    pub fn add(&mut self, other: &QuicLbCounters) {
        self.by_cid = self.by_cid.wrapping_add(other.by_cid);
        self.by_fallback = self.by_fallback.wrapping_add(other.by_fallback);
        self.undecodable = self.undecodable.wrapping_add(other.undecodable);
    }
}

/// Rates as `ipvsadm --rate` prints them: per second, rounded like the kernel.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    /// Connections per second.
    pub cps: u64,
    /// Inbound packets per second.
    pub inpps: u64,
    /// Outbound packets per second.
    pub outpps: u64,
    /// Inbound bytes per second.
    pub inbps: u64,
    /// Outbound bytes per second.
    pub outbps: u64,
}

/// Interval of the kernel's estimator (`ip_vs_est.c`): 2 seconds.
pub const ESTIMATOR_INTERVAL_MS: u64 = 2000;

/// The kernel's rate estimator: every 2 s, an exponentially weighted moving
/// average with weight 1/4 of the last interval's rate, kept in fixed point
/// (×2^10 for conns and packets, ×2^5 for bytes) so that results match
/// `ipvsadm --rate` on the same traffic.
#[derive(Clone, Debug, Default)]
pub struct Estimator {
    last: Counters,
    last_tick: Option<Instant>,
    cps: i64,
    inpps: i64,
    outpps: i64,
    inbps: i64,
    outbps: i64,
}

/// More missed intervals than this are folded into one catch-up: after 64
/// idle intervals the averages are zero anyway.
const MAX_CATCH_UP: u64 = 64;

impl Estimator {
    /// Feed the current counters. Runs one estimation step per whole 2 s
    /// interval elapsed since the last step; cheap to call more often.
    pub fn update(&mut self, now: Instant, current: &Counters) {
        let Some(last_tick) = self.last_tick else {
            self.last_tick = Some(now);
            self.last = *current;
            return;
        };
        let elapsed = now.as_millis().saturating_sub(last_tick.as_millis());
        let steps = elapsed / ESTIMATOR_INTERVAL_MS;
        if steps == 0 {
            return;
        }
        // The first step sees the whole delta (the kernel would have seen it
        // spread over the missed intervals; the sum is what matters), the
        // others are idle intervals.
        self.step(current);
        for _ in 1..steps.min(MAX_CATCH_UP) {
            self.step(current);
        }
        self.last_tick = Some(Instant::from_millis(
            last_tick.as_millis() + steps * ESTIMATOR_INTERVAL_MS,
        ));
    }

    fn step(&mut self, cur: &Counters) {
        fn ewma(avg: &mut i64, delta: u64, shift: u32) {
            let rate = i64::try_from(delta).unwrap_or(i64::MAX >> 10) << shift;
            *avg += (rate - *avg) >> 2;
        }
        let last = &self.last;
        for (avg, now, before, shift) in [
            (&mut self.cps, cur.conns, last.conns, 9),
            (&mut self.inpps, cur.inpkts, last.inpkts, 9),
            (&mut self.outpps, cur.outpkts, last.outpkts, 9),
            (&mut self.inbps, cur.inbytes, last.inbytes, 4),
            (&mut self.outbps, cur.outbytes, last.outbytes, 4),
        ] {
            ewma(avg, now.wrapping_sub(before), shift);
        }
        self.last = *cur;
    }

    /// Forget the averages (`ipvsadm -Z`).
    pub fn reset(&mut self, current: &Counters) {
        *self = Estimator {
            last: *current,
            last_tick: self.last_tick,
            ..Estimator::default()
        };
    }

    /// Current rates, rounded as the kernel reads them out.
    pub fn rates(&self) -> Rates {
        let r10 = |v: i64| u64::try_from((v + 0x1FF) >> 10).unwrap_or(0);
        let r5 = |v: i64| u64::try_from((v + 0xF) >> 5).unwrap_or(0);
        Rates {
            cps: r10(self.cps),
            inpps: r10(self.inpps),
            outpps: r10(self.outpps),
            inbps: r5(self.inbps),
            outbps: r5(self.outbps),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_rate_converges() {
        let mut e = Estimator::default();
        let mut c = Counters::default();
        e.update(Instant::ZERO, &c);
        for i in 1..=80u64 {
            c.conns += 200; // 100 per second
            c.inpkts += 2000;
            c.inbytes += 2_000_000;
            e.update(Instant::from_millis(i * 2000), &c);
        }
        let r = e.rates();
        assert_eq!(r.cps, 100);
        assert_eq!(r.inpps, 1000);
        assert_eq!(r.inbps, 1_000_000);
        assert_eq!(r.outpps, 0);
    }

    #[test]
    fn idle_decays_to_zero() {
        let mut e = Estimator::default();
        let mut c = Counters::default();
        e.update(Instant::ZERO, &c);
        c.conns = 1000;
        e.update(Instant::from_millis(2000), &c);
        assert!(e.rates().cps > 0);
        e.update(Instant::from_secs(10_000), &c);
        assert_eq!(e.rates(), Rates::default());
    }

    #[test]
    fn calls_within_an_interval_do_nothing() {
        let mut e = Estimator::default();
        let mut c = Counters::default();
        e.update(Instant::ZERO, &c);
        c.conns = 10;
        e.update(Instant::from_millis(1999), &c);
        assert_eq!(e.rates().cps, 0);
        e.update(Instant::from_millis(2000), &c);
        // first step: rate 5/s × 1/4
        assert_eq!(e.rates().cps, 1);
    }
}
