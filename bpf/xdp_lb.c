// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * xdp_lb.c: the rvs director program (XDP).
 *
 * Packet path: Ethernet (+ one 802.1Q/802.1ad tag) -> IPv4 (options honoured)
 * or IPv6 (no extension headers) -> TCP/UDP -> flow lookup (hit: refresh
 * state, count, forward) -> miss: service lookup, schedule, insert ->
 * forward by the real server's method: DR (MAC rewrite), TUN IPIP/GUE/GRE/
 * Geneve, DSR by IP option (lib/dsr_opt.h, in the tail-called xdp_dsr_opt),
 * NAT (inbound rewrite; replies rewritten back by the reply path),
 * FULLNAT (source and destination rewrite, in the tail-called xdp_fnat,
 * lib/fnat.h; an established IPv4 flow whose pair xdp_fnat recorded in its
 * entry is rewritten here, without the tail call).
 * IPv4 flows live in flows4 (16-byte key), IPv6 flows in flows; while
 * half-open flows come fast (a SYN flood: flood_note, rvs.h) a TCP flow lives in
 * embryonic4 (embryonic) from its SYN to the ACK that completes its
 * handshake, so a SYN flood cannot evict established flows. The most
 * common packet (an ACK or datagram of an established DR flow) takes a
 * fast path in front of all this (fast_established; fast_established6 for
 * IPv6), which finds the flow in a per-CPU cache (flow_cache; flow6_cache)
 * before it looks at flows4 (flows).
 *
 * The flow table comes first, as in IPVS's ip_vs_in (connection lookup
 * before the service): only VIP traffic creates flows, an established flow
 * costs one hash lookup, and flows of a deleted service keep going until
 * they expire or the control side removes them (IPVS keeps such
 * connections too). Expiry: an entry older than its state's timeout is
 * treated as absent (a SYN or a UDP datagram is scheduled afresh at once).
 *
 * Packets that are not plainly ours (other hosts' frames, non-VIP traffic,
 * fragments, extension headers, malformed headers, a segment without SYN of
 * an unknown flow, no real server available) get XDP_PASS: the kernel's
 * own stack judges, counts and answers them as it would without rvs. Each
 * case and its reason: docs/dataplane-xdp.md, "What the program leaves to
 * the kernel".
 * UDP services with QUIC-LB configurations route every datagram by its QUIC
 * connection ID and make no flow entries (lib/quic_lb.h).
 */
#include "lib/common.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/flow.h"
#include "lib/hash.h"
#include "lib/sched.h"
#include "lib/src_range.h"
#include "lib/tcp_state.h"
#include "lib/stats.h"
#include "lib/csum.h"
#include "lib/l2.h"
#include "lib/encap.h"
#include "lib/forward.h"
#include "lib/nat.h"
#include "lib/icmp.h"
#include "lib/fast.h"
#include "lib/own_mac.h"
#include "lib/fnat.h"
#include "lib/quic_lb.h"
#include "lib/adopt.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

SEC("xdp")
int xdp_lb(struct xdp_md *ctx)
{
	struct pkt p = {};
	struct rvs_svc_key sk = {};
	struct rvs_flow nf = {};
	struct rvs_config *cfg;
	struct rvs_svc *svc;
	struct rvs_dest *d;
	struct rvs_flow *f;
	__u32 zero = 0, svc_idx, dest_idx, old_dest = RVS_SLOT_EMPTY;
	__u8 old_state = 0;
	__u32 *svcp;
	__u64 now;
	int syn, is_tcp, hashed, looked = 0, embryo = 0, in_main = 0;
	struct rvs_flow *found = NULL;

	if (!own_frame(ctx))
		return XDP_PASS;
	RVS_HOOK_ENTRY(ctx);
	{
		int rc = fast_established(ctx, &found, &looked);

		if (rc >= 0)
			return rc;
	}
	if (parse(ctx, &p))
		return XDP_PASS;
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return XDP_PASS;
	if (p.icmp)
		return icmp_error(ctx, &p, cfg);

	is_tcp = p.proto == IPPROTO_TCP;
	syn = is_tcp && (p.tcpflags & TCPF_SYN) && !(p.tcpflags & TCPF_RST);
	/* Jiffies: plenty for timeouts in seconds, and one load (a nanosecond
	 * clock cost ~15 ns per packet here). */
	now = bpf_jiffies64();

	/* Like IPVS's ip_vs_in: the connection table first (only VIP traffic
	 * ever creates entries), the service only for a new connection. */
	f = looked ? found : flow_lookup(p.family, p.saddr, p.daddr, p.sport, p.dport, p.proto);
	/* A TCP flow between its SYN and its handshake's ACK lives in the
	 * embryonic table, out of reach of the flow table (rvs.h), while the
	 * tables are armed; not looked up while none of its entries can be
	 * live (the tables unarmed for longer than the longest timeout). */
	if (!f && is_tcp && embryo_maybe_live(cfg, now)) {
		f = embryo_lookup(&p);
		embryo = f != NULL;
	}
	if (f) {
		int expired = now - f->last_seen > flow_timeout(cfg, f, p.proto);
		int closed = f->state == RVS_TCP_S_TIME_WAIT || f->state == RVS_TCP_S_CLOSE;
		__u32 didx = f->dest;
		/* FULLNAT's recorded pair (lib/fnat.h), read before a
		 * promotion may free the entry; lport first (fnat_record). */
		__be16 rec_lport = *(volatile __be16 *)&f->fnat_lport;
		__be32 rec_laddr = *(volatile __be32 *)&f->fnat_laddr;
		__u8 rec_flags = f->flags, rec_table = RVS_FNAT_REC_FLOWS;

		d = bpf_map_lookup_elem(&dests, &didx);
		if (!d)
			return XDP_DROP;
		/* Replaced below if a new flow is inserted over it (an embryonic
		 * one in its own table). in_main: 1 found in the flow table, 2 in
		 * the embryonic one (one variable: xdp_lb's frame is at the 6.1
		 * verifier's limit). */
		old_dest = didx;
		old_state = f->state;
		in_main = embryo ? 2 : 1;
		if (syn && (expired || closed || (d->flags & RVS_DEST_F_UNAVAILABLE)))
			goto new_flow; /* conn_reuse_mode: a new connection */
		if (expired)
			goto new_flow; /* as unknown: TCP non-SYN passes, UDP schedules */
		if (d->flags & RVS_DEST_F_UNAVAILABLE)
			return XDP_DROP; /* IPVS without expire_nodest_conn */
		f->last_seen = now;
		if (embryo)
			embryo_touch(now);
		svc_idx = f->svc;
		if (is_tcp) {
			__u8 old = f->state, st;

			st = tcp_next_state(old, p.tcpflags,
					    (f->flags & RVS_FLOW_F_NOOUTPUT) ? DIR_INPUT_ONLY : DIR_INPUT);
			f->state = st;
			conns_move(didx, p.proto, old, st);
			/* A completed handshake does not count toward arming
			 * the embryonic tables (flood_note). */
			if (old == RVS_TCP_S_SYN_RECV && st == RVS_TCP_S_ESTABLISHED)
				flood_completed(&zero);
			/* (`f` is not read after a promotion deleted it.) */
			if (embryo && st == RVS_TCP_S_ESTABLISHED && embryo_promote(&p, f) == 0)
				flood_count(svc_idx, promoted);
			else if (embryo)
				rec_table = RVS_FNAT_REC_EMBRYONIC;
			/* Cached ESTABLISHED entries of this flow must go. Only
			 * an ESTABLISHED entry is ever cached, and every change
			 * away from ESTABLISHED (or replacement of an entry)
			 * bumps: while a flow is in any other state no CPU holds
			 * a valid cache entry of it, so a change into
			 * ESTABLISHED (the handshake's ACK, a promotion) needs
			 * no bump. */
			if (st != old && old == RVS_TCP_S_ESTABLISHED)
				flow_epoch_bump(&p);
		}
		count(&svc_stats, svc_idx, p.l3len, 0, 0);
		count(&dest_stats, didx, p.l3len, 0, 0);
		if (d->method == RVS_FWD_FNAT)
			return fnat_established(ctx, &p, d, didx, svc_idx, rec_table, rec_laddr,
						rec_lport, rec_flags);
		return forward(ctx, &p, d, cfg);
	}

new_flow:
	sk.proto = p.proto;
	sk.family = p.family;
	sk.port = p.dport;
	__builtin_memcpy(sk.vip, p.daddr, 16);
	svcp = bpf_map_lookup_elem(&services, &sk);
	CALL_SITE_TAG(24);
	if (!svcp) {
		/* A port-zero service takes every other port of its VIP (IPVS's
		 * catch-all, looked up after the exact port). */
		sk.port = 0;
		svcp = bpf_map_lookup_elem(&services, &sk);
		CALL_SITE_TAG(25);
	}
	if (!svcp) {
		/* FULLNAT replies come to a local address (xdp_fnat). */
		if ((cfg->flags & RVS_CFG_F_FNAT) && fnat_is_laddr(&p))
			return fnat_enter(ctx, RVS_FNAT_REPLY, 0, 0);
		/* A QUIC-LB service (quic_services, not in services): every
		 * datagram by its connection ID, no flow entry (lib/quic_lb.h,
		 * the program xdp_quic). Looked up on this exit only: the main
		 * path's verification stays as it was. */
		sk.port = p.dport;
		svcp = bpf_map_lookup_elem(&quic_services, &sk);
		CALL_SITE_TAG(46);
		if (svcp)
			return quic_enter(ctx, *svcp);
		return nat_reply(ctx, &p, cfg);
	}
	svc_idx = *svcp;
	svc = bpf_map_lookup_elem(&svc_info, &svc_idx);
	if (!svc || svc->sched == RVS_SCHED_NONE)
		return XDP_PASS;
	hashed = svc->sched == RVS_SCHED_MH || svc->sched == RVS_SCHED_SH ||
		 svc->sched == RVS_SCHED_DH;
	/* A TCP segment without SYN for an unknown flow is not ours (IPVS),
	 * unless the service is hash-scheduled: then the hash names the flow's
	 * real server on any director (the flow moved here, or its entry was
	 * lost or never made under a flood), and it is adopted below. */
	if (is_tcp && !syn && !hashed) {
		flood_count(svc_idx, unknown);
		return XDP_PASS;
	}
	/* Behind the service's source ranges (lib/src_range.h). */
	dest_idx = schedule_new(svc, svc_idx, &p, sk.port, cfg, now);
	if (dest_idx >= RVS_SLOT_REFUSED)
		return dest_idx == RVS_SLOT_REFUSED ? XDP_DROP : XDP_PASS;
	d = bpf_map_lookup_elem(&dests, &dest_idx);
	if (!d)
		return XDP_PASS;
	/* Mid-flow (hashed only, above): adopted into the flow table
	 * (lib/adopt.h). */
	if (is_tcp && !syn)
		return adopt_midflow(ctx, &p, &nf, d, cfg, svc_idx, dest_idx, now, in_main == 1,
				     old_dest, old_state);
	nf.last_seen = now;
	nf.dest = dest_idx;
	nf.svc = svc_idx;
	nf.flags = RVS_FLOW_F_NOOUTPUT;
	nf.state = is_tcp ? tcp_next_state(RVS_TCP_S_NONE, p.tcpflags, DIR_INPUT_ONLY)
			  : RVS_UDP_S_NORMAL;
	/* Under a flood, hash-scheduled DR/TUN flows need no entry: the next
	 * packet hashes to the same server (as long as the table does not
	 * change). rr/wrr and NAT always need theirs. While the embryonic
	 * tables are armed (flood_note) a new TCP flow starts there, unless
	 * it replaces an entry of the flow table (which would hide it there);
	 * unarmed, in the flow table (one insert), unless it replaces an
	 * embryonic entry. */
	if (is_tcp || !(svc->flags & RVS_SVC_F_ONEPACKET)) {
		int fl = flood_note(cfg, now);

		embryo = is_tcp && in_main != 1 && (in_main == 2 || (fl & FLOOD_ARMED));
		if ((fl & FLOOD_OVER) && hashed && d->method != RVS_FWD_NAT &&
		    d->method != RVS_FWD_FNAT) {
			flood_count(svc_idx, guarded);
		} else if ((embryo ? embryo_insert(&p, &nf) : flow_insert(&p, &nf)) == 0) {
			if (embryo) {
				embryo_touch(now);
				flood_count(svc_idx, embryonic);
			}
			if (old_dest != RVS_SLOT_EMPTY)
				conns_add(old_dest, state_active(p.proto, old_state), -1);
			conns_add(dest_idx, state_active(p.proto, nf.state), 1);
		}
	}
	/* A new flow (inserted, or forwarded without an entry under a flood or
	 * -o) replaces whatever a cache may still hold for this key: a flow
	 * the LRU evicted, or a closed one, may be cached on another CPU. */
	flow_epoch_bump(&p);
	if (d->method == RVS_FWD_NAT)
		nat_rev_add(&p, d, svc_idx, dest_idx);
	count(&svc_stats, svc_idx, p.l3len, 0, 1);
	count(&dest_stats, dest_idx, p.l3len, 0, 1);
	if (d->method == RVS_FWD_FNAT)
		return fnat_enter(ctx, RVS_FNAT_INBOUND, dest_idx, svc_idx);
	return forward(ctx, &p, d, cfg);
}

/* FULLNAT (lib/fnat.h), tail-called through fnat_prog. */
SEC("xdp")
int xdp_fnat(struct xdp_md *ctx)
{
	return fnat_main(ctx);
}

/* The datagrams of QUIC-LB services (tail-called through quic_prog with the
 * service index in quic_tmp): routed by connection ID (lib/quic_lb.h),
 * forwarded by the real server's method, without a flow entry. Like
 * xdp_fnat and xdp_dsr_opt a program of its own: xdp_lb is at the
 * verifier's stack limit and near its instruction budget. */
SEC("xdp")
int xdp_quic(struct xdp_md *ctx)
{
	return quic_main(ctx);
}

/* DSR by IP option (lib/dsr_opt.h), tail-called by forward() (dsr_prog). */
SEC("xdp")
int xdp_dsr_opt(struct xdp_md *ctx)
{
	return dsr_opt_main(ctx);
}
