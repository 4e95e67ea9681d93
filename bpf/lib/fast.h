// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/fast.h: the established-flow fast path (fast_established and its
 * IPv6 counterpart). */
#ifndef RVS_LIB_FAST_H
#define RVS_LIB_FAST_H

#include "lib/flow.h"
#include "lib/stats.h"
#include "lib/l2.h"
#include "lib/tcp_state.h"

/* -------------------------------------------------- established fast path */

/* The fast path's two state changes (fast_established, fast_established6),
 * made once every check passed, without the general path's second parse
 * and lookup (lib/tcp_state.h's tables): the ACK that completes the
 * handshake of a flow that went straight to the flow table (SYN_RECV, the
 * embryonic tables unarmed) makes it ESTABLISHED in either direction's
 * table, both active (no ActiveConn move), the handshake counted by the
 * caller (flood_completed); the client's FIN (`fin`) of an
 * ESTABLISHED flow without replies (DR) makes it FIN_WAIT, active to
 * inactive. `f` goes to the available DR real server `d` in dests slot
 * *didx (a pointer: dest_conns is keyed by that same stack slot), of
 * service `svc`; `ep` is the flow's epoch, `l3len` the packet's IP length.
 * Neither change is cached. Returns l2_out's verdict. */
static __always_inline int fast_state_change(struct xdp_md *ctx, struct rvs_flow *f,
					     const struct rvs_dest *d, __u32 *didx, __u32 svc,
					     __u32 l3len, __u32 *ep, __u64 now, int fin)
{
	if (fin) {
		struct rvs_dest_conns *dc;

		/* The write, then the epoch (flow_epoch_bump); not cached
		 * (its epoch is gone). */
		f->state = RVS_TCP_S_FIN_WAIT;
		f->last_seen = now;
		/* conns_move's two adds, on one lookup (keyed by the dests
		 * lookup's slot: xdp_lb's frame has no byte to spare on Linux
		 * 6.1, whose verifier refuses a call chain over 512 bytes). */
		dc = bpf_map_lookup_elem(&dest_conns, didx);
		if (dc) {
			__sync_fetch_and_add(&dc->active, -1);
			__sync_fetch_and_add(&dc->inactive, 1);
		}
		__sync_fetch_and_add(ep, 1);
	} else {
		/* No epoch bump: only an ESTABLISHED entry is ever cached, and
		 * whatever made this one SYN_RECV (an insert, a change away
		 * from ESTABLISHED) bumped its epoch after its write, so no CPU
		 * holds a valid cache entry of the flow. Not cached: the next
		 * packet fills the cache. */
		f->state = RVS_TCP_S_ESTABLISHED;
		f->last_seen = now;
	}
	count(&svc_stats, svc, l3len, 0, 0);
	count(&dest_stats, *didx, l3len, 0, 0);
	return l2_out(ctx, d->mac, d->smac, d->ifindex);
}

/* fast_established's IPv6 counterpart (the same checks, counters,
 * last_seen stamping and MAC rewrite, and the same two state changes: the
 * handshake's ACK of a SYN_RECV flow, the client's FIN of an ESTABLISHED
 * one without replies): an untagged IPv6 frame whose next header is TCP
 * (ACK or FIN|ACK, none of SYN/RST) or UDP directly, of a live flow in
 * `flows` to an available DR real server, served from this CPU's
 * flow6_cache or else from `flows` (the cache entry then refilled).
 * Anything else returns -1 for the general path, with the `flows` lookup's
 * result in *found when *looked is set. Inlined like fast_established: the
 * main program's frame grows from 328 to 344 bytes (deepest call chain,
 * with sched_lblcr and its bpf_loop callback, well below 512), and a hit
 * costs ~8 ns less than through a BPF-to-BPF call (xdp_bench: 36 against
 * 44 ns per packet). */
static __always_inline int fast_established6(struct xdp_md *ctx, struct rvs_flow **found, int *looked)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	struct tcphdr *th = (void *)(ip6 + 1);
	struct rvs_flow_key k __attribute__((aligned(8))) = {};
	const __u64 *ck, *kk = (const __u64 *)&k;
	struct rvs_flow6_cache *c;
	struct rvs_config *cfg;
	struct rvs_flow *f;
	struct rvs_dest *d;
	__u32 didx, svc, l3len, slot, epoch, *ep, zero = 0;
	__u8 proto, state;
	__u64 now, h, timeout;
	int stale, hs, fin = 0;

	if ((void *)(th + 1) > end)
		return -1;
	/* Version 6 (the caller checked the EtherType). */
	if ((*(__u8 *)ip6 & 0xf0) != 0x60)
		return -1;
	proto = ip6->nexthdr;
	if (proto == IPPROTO_TCP) {
		__u8 tf = ((__u8 *)th)[13] & (TCPF_SYN | TCPF_FIN | TCPF_RST | TCPF_ACK);

		fin = tf == (TCPF_FIN | TCPF_ACK);
		if (tf != TCPF_ACK && !fin)
			return -1;
		state = RVS_TCP_S_ESTABLISHED;
	} else if (proto == IPPROTO_UDP) {
		state = RVS_UDP_S_NORMAL;
	} else {
		return -1;
	}
	/* Source and destination address are adjacent, as in the key. */
	__builtin_memcpy(k.caddr, &ip6->saddr, 32);
	__builtin_memcpy(&k.cport, &th->source, 4);
	k.proto = proto;
	k.family = RVS_AF_INET6;
	l3len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);

	h = flow6_cache_hash(&k);
	slot = flow6_cache_slot(h);
	c = bpf_map_lookup_elem(&flow6_cache, &slot);
	CALL_SITE_TAG(26);
	slot = flow_epoch_slot(h);
	ep = bpf_map_lookup_elem(&flow_epochs, &slot);
	CALL_SITE_TAG(27);
	if (!c || !ep)
		return -1;
	/* Read before flows (see flow_epoch_bump). */
	epoch = *(volatile __u32 *)ep;
	now = bpf_jiffies64();
	ck = (const __u64 *)&c->key;
	if (!fin && ck[0] == kk[0] && ck[1] == kk[1] && ck[2] == kk[2] && ck[3] == kk[3] &&
	    ck[4] == kk[4] && c->epoch == epoch && now - c->stamp < RVS_FLOW_CACHE_JIFFIES) {
		didx = c->dest;
		d = bpf_map_lookup_elem(&dests, &didx);
		CALL_SITE_TAG(28);
		if (d && d->method == RVS_FWD_DR && !(d->flags & RVS_DEST_F_UNAVAILABLE)) {
			count(&svc_stats, c->svc, l3len, 0, 0);
			count(&dest_stats, didx, l3len, 0, 0);
			return l2_out(ctx, d->mac, d->smac, d->ifindex);
		}
	}

	f = bpf_map_lookup_elem(&flows, &k);
	CALL_SITE_TAG(29);
	*found = f;
	*looked = 1;
	if (!f)
		return -1;
	/* The two state changes (fast_state_change). */
	hs = proto == IPPROTO_TCP && !fin && f->state == RVS_TCP_S_SYN_RECV;
	if (f->state != state && !hs)
		return -1;
	if (fin && !(f->flags & RVS_FLOW_F_NOOUTPUT))
		return -1;
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return -1;
	timeout = (proto == IPPROTO_TCP ? cfg->tcp_timeouts[hs ? RVS_TCP_S_SYN_RECV
							       : RVS_TCP_S_ESTABLISHED]
					: cfg->udp_timeout) *
		  (__u64)cfg->hz;
	stale = f->last_seen != now;
	if (stale && now - f->last_seen > timeout)
		return -1;
	didx = f->dest;
	d = bpf_map_lookup_elem(&dests, &didx);
	if (!d || d->method != RVS_FWD_DR || (d->flags & RVS_DEST_F_UNAVAILABLE))
		return -1;
	svc = f->svc;
	if (hs)
		flood_completed(&zero);
	if (hs || fin)
		return fast_state_change(ctx, f, d, &didx, svc, l3len, ep, now, fin);
	if (stale)
		f->last_seen = now;
	/* Cached only when the flow cannot expire while its entry is valid
	 * (see fast_established). */
	if (timeout > RVS_FLOW_CACHE_JIFFIES) {
		c->key = k;
		c->stamp = RVS_HOOK_CACHE_STAMP(now);
		c->dest = didx;
		c->svc = svc;
		c->epoch = epoch;
	}
	count(&svc_stats, svc, l3len, 0, 0);
	count(&dest_stats, didx, l3len, 0, 0);
	return l2_out(ctx, d->mac, d->smac, d->ifindex);
}

/* The common packet of an established DR flow, with nothing to decide: an
 * untagged IPv4 frame without options or fragmentation, TCP with ACK and
 * none of SYN/FIN/RST (its state stays ESTABLISHED: no state change, no
 * ActiveConn move) or UDP, whose live flow goes to an available DR real
 * server. It is parsed at fixed offsets, counted and sent on with the
 * fewest instructions. The two state changes of a short DR connection
 * after its SYN (the handshake's ACK, the client's FIN) take it too,
 * through flows4 (below).
 *
 * First this CPU's flow cache (no hash-table lookup: a per-CPU array
 * element the verifier inlines): a valid entry (same key, epoch unchanged,
 * checked against flows4 less than RVS_FLOW_CACHE_JIFFIES ago) gives the
 * real server. Otherwise flows4 is looked up, its entry checked as before
 * and stamped, and the cache entry (re)filled. The dests[] element is read
 * on every packet either way, so a real server made unavailable, deleted or
 * switched to another method stops getting the flow's packets at once.
 *
 * Anything else returns -1 for the general path, with the flows4 lookup's
 * result in *found when *looked is set (the general path parses the same
 * 5-tuple and must not pay a second lookup). No side effect happens before
 * the last check. */
static __always_inline int fast_established(struct xdp_md *ctx, struct rvs_flow **found,
					    int *looked)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct tcphdr *th = (void *)(ip + 1);
	struct rvs_flow4_key k __attribute__((aligned(8))) = {};
	struct rvs_flow_cache *c;
	struct rvs_config *cfg;
	struct rvs_flow *f;
	struct rvs_dest *d;
	__u32 didx, svc, l3len, slot, epoch, *ep, zero = 0;
	__u8 proto, state;
	__u64 now, h, timeout;
	int stale, hs, fin = 0;

	RVS_HOOK_FAST_PATH();
	/* A whole TCP header's worth (a UDP datagram with less than 12 bytes
	 * of payload in an unpadded frame takes the general path). */
	if ((void *)(th + 1) > end)
		return -1;
	/* Whole-word loads (struct ethhdr is packed: its field would be read
	 * byte by byte). 0x45: version 4, no options. */
	if (*(__be16 *)(data + 12) != bpf_htons(ETH_P_IP)) {
		if (*(__be16 *)(data + 12) == bpf_htons(ETH_P_IPV6))
			return fast_established6(ctx, found, looked);
		return -1;
	}
	if (*(__u8 *)ip != 0x45 || (ip->frag_off & bpf_htons(0x3fff)))
		return -1;
	proto = ip->protocol;
	if (proto == IPPROTO_TCP) {
		__u8 tf = ((__u8 *)th)[13] & (TCPF_SYN | TCPF_FIN | TCPF_RST | TCPF_ACK);

		/* The client's FIN too (a state change, below). */
		fin = tf == (TCPF_FIN | TCPF_ACK);
		if (tf != TCPF_ACK && !fin)
			return -1;
		state = RVS_TCP_S_ESTABLISHED;
	} else if (proto == IPPROTO_UDP) {
		state = RVS_UDP_S_NORMAL;
	} else {
		return -1;
	}
	__builtin_memcpy(k.caddr, &ip->saddr, 4);
	__builtin_memcpy(k.vaddr, &ip->daddr, 4);
	/* Source and destination port (UDP's are at the same place). */
	__builtin_memcpy(&k.cport, &th->source, 4);
	k.proto = proto;
	l3len = bpf_ntohs(ip->tot_len);

	h = flow_cache_hash(&k);
	slot = flow_cache_slot(h);
	c = bpf_map_lookup_elem(&flow_cache, &slot);
	CALL_SITE_TAG(21);
	slot = flow_epoch_slot(h);
	ep = bpf_map_lookup_elem(&flow_epochs, &slot);
	CALL_SITE_TAG(22);
	if (!c || !ep)
		return -1;
	/* Read before flows4 (see flow_epoch_bump). */
	epoch = *(volatile __u32 *)ep;
	now = bpf_jiffies64();
	if (!fin && ((const __u64 *)&c->key)[0] == ((const __u64 *)&k)[0] &&
	    ((const __u64 *)&c->key)[1] == ((const __u64 *)&k)[1] && c->epoch == epoch &&
	    now - c->stamp < RVS_FLOW_CACHE_JIFFIES) {
		didx = c->dest;
		d = bpf_map_lookup_elem(&dests, &didx);
		CALL_SITE_TAG(23);
		if (d && d->method == RVS_FWD_DR && !(d->flags & RVS_DEST_F_UNAVAILABLE)) {
			count(&svc_stats, c->svc, l3len, 0, 0);
			count(&dest_stats, didx, l3len, 0, 0);
			return l2_out(ctx, d->mac, d->smac, d->ifindex);
		}
	}

	f = bpf_map_lookup_elem(&flows4, &k);
	*found = f;
	*looked = 1;
	if (!f)
		return -1;
	/* The handshake's ACK of a SYN_RECV flow, the client's FIN of an
	 * ESTABLISHED one without replies: fast_state_change. */
	hs = proto == IPPROTO_TCP && !fin && f->state == RVS_TCP_S_SYN_RECV;
	if (f->state != state && !hs)
		return -1;
	if (fin && !(f->flags & RVS_FLOW_F_NOOUTPUT))
		return -1;
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return -1;
	timeout = (proto == IPPROTO_TCP ? cfg->tcp_timeouts[hs ? RVS_TCP_S_SYN_RECV
							       : RVS_TCP_S_ESTABLISHED]
					: cfg->udp_timeout) *
		  (__u64)cfg->hz;
	/* Seen in this jiffy: neither expired nor to be stamped again. */
	stale = f->last_seen != now;
	if (stale && now - f->last_seen > timeout)
		return -1;
	didx = f->dest;
	d = bpf_map_lookup_elem(&dests, &didx);
	if (!d || d->method != RVS_FWD_DR || (d->flags & RVS_DEST_F_UNAVAILABLE))
		return -1;
	svc = f->svc;
	if (hs)
		flood_completed(&zero);
	if (hs || fin)
		return fast_state_change(ctx, f, d, &didx, svc, l3len, ep, now, fin);
	/* Stored once per jiffy, not per packet: the entry's cache line is
	 * then only read while a flow's packets spread over several CPUs. */
	if (stale)
		f->last_seen = now;
	/* Cached only when the flow cannot expire while its entry is valid:
	 * then an expired flow (the only kind the control side removes) never
	 * has a valid cache entry. */
	if (timeout > RVS_FLOW_CACHE_JIFFIES) {
		c->key = k;
		c->stamp = RVS_HOOK_CACHE_STAMP(now);
		c->dest = didx;
		c->svc = svc;
		c->epoch = epoch;
	}
	count(&svc_stats, svc, l3len, 0, 0);
	count(&dest_stats, didx, l3len, 0, 0);
	return l2_out(ctx, d->mac, d->smac, d->ifindex);
}

#endif /* RVS_LIB_FAST_H */
