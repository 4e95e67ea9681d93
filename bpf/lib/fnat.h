// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/fnat.h: FULLNAT (the Alibaba LVS / DPVS FNAT mode) in its own XDP
 * program, xdp_fnat, which xdp_lb reaches by a tail call through fnat_prog
 * (its own 512-byte stack and verifier budget: the director's stack is
 * full). xdp_lb keeps the flow (flows4/flows/embryonic tables: state,
 * timeouts, stats, -Lcn, sync and sweep as for NAT) and hands over, in the
 * per-CPU fnat_tmp, either
 *  - RVS_FNAT_INBOUND: a packet of a flow whose real server is FULLNAT
 *    (state and inbound stats already done): client:cport -> VIP:vport
 *    becomes laddr:lport -> RS:rport, the (laddr, lport) taken from the
 *    service's pool (fnat_pools) so that no live flow to the same
 *    (RS, rport, proto) holds it (fnat_rev, inserted with BPF_NOEXIST);
 *  - RVS_FNAT_REPLY: a packet to a local address (fnat_laddrs) that is no
 *    VIP traffic: RS:rport -> laddr:lport, found in fnat_rev, becomes
 *    VIP:vport -> client:cport (state DIR_OUTPUT, stats out).
 * Both leave by the kernel's FIB (fib_out, like NAT). The real servers
 * need no route back through the director.
 *
 * ICMP errors about FULLNAT flows (destination unreachable, incl.
 * fragmentation needed / packet too big, time exceeded; quoting TCP or
 * UDP) are translated both ways, every checksum fixed incrementally
 * (outer IPv4 header, quoted IPv4 header, quoted TCP/UDP when the quote
 * holds it, ICMP / ICMPv6 with its pseudo-header):
 *  - RVS_FNAT_ICMP_OUT: an error to a local address quoting laddr:lport ->
 *    RS:rport (from the real server or a router on its side), found in
 *    fnat_rev, becomes VIP -> client quoting client:cport -> VIP:vport
 *    (the outer source is the VIP, as for NAT; TTL decremented);
 *  - RVS_FNAT_ICMP_IN: an error to the VIP quoting VIP:vport ->
 *    client:cport (from the client's side about a reply), found by the
 *    flow (fnat_fwd, checked against fnat_rev), becomes laddr -> RS quoting
 *    RS:rport -> laddr:lport.
 * Both leave by the FIB and are counted in the flow's service and real
 * server stats and in fnat_stats (icmp_to_client, icmp_to_rs). FULLNAT
 * adds no bytes, so MTUs pass unchanged, with one exception: a
 * frag-needed / packet-too-big toward the client about a TCP flow whose TOA
 * is armed (see below) has its MTU lowered by the TOA's length (8 / 20
 * bytes; not below 68 / 1280; counted as icmp_mtu_lowered), since the
 * client's segments that get the TOA grow by that much on the real
 * server's path. Errors that match no flow are the kernel's.
 *
 * TOA (the client's address for the real server, lib/toa_insert.h). The
 * real server's reader (bpf/toa.c, toa.ko) takes it from the ACK that
 * completes the handshake. As DPVS (tcp_in_add_toa on the segments whose
 * acknowledgment is the SYN-ACK's sequence + 1): when the real server's
 * SYN-ACK passes (fnat_reply), its sequence + 1 is kept in the flow's
 * fnat_rev entry (toa_ack) and its MSS option lowered by the TOA's length
 * (toa_mss_clamp), so a client data segment that carries the option still
 * fits the path; every client segment without SYN/RST that acknowledges
 * exactly that number gets the TOA: the handshake's ACK, and the data sent
 * before the real server answered (which completes the handshake if the
 * ACK was lost). The first segment of the real server after its SYN-ACK
 * ends it (toa_ack = 0). A SYN-ACK whose sequence + 1 is 0 (one in 2^32)
 * gets no TOA. The MTU limit is the config's tun_mtu (the path MTU toward
 * the real servers, the interface's by default), none when 0. Outcomes
 * counted per service in fnat_stats; the segment goes on without the option
 * when it does not fit (no room, MTU), as DPVS does. */
#ifndef RVS_LIB_FNAT_H
#define RVS_LIB_FNAT_H

#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/flow.h"
#include "lib/stats.h"
#include "lib/tcp_state.h"
#include "lib/csum.h"
#include "lib/forward.h"
#include "lib/toa_insert.h"

/* The pool hash of a client tuple and the odd stride between candidates
 * (rvs_xdp::maps::fnat_candidate mirrors both: the tests predict ports). */
#define RVS_FNAT_SEED 0x5256535f666e6174ull
#define RVS_FNAT_MUL 0x9e3779b97f4a7c15ull
#define RVS_FNAT_STRIDE 0x9e3779b1u

/* ------------------------------------------------------- in xdp_lb */

/* Hand the packet to xdp_fnat; returns only when the tail call failed
 * (fnat_prog empty): the packet is passed and counted in fnat_missed. */
static __always_inline int fnat_enter(struct xdp_md *ctx, __u32 kind, __u32 dest, __u32 svc)
{
	__u32 zero = 0;
	struct rvs_fnat_tmp *t = bpf_map_lookup_elem(&fnat_tmp, &zero);
	__u64 *missed;

	if (!t)
		return XDP_PASS;
	t->kind = kind;
	t->dest = dest;
	t->svc = svc;
	bpf_tail_call(ctx, &fnat_prog, RVS_FNAT_PROG);
	missed = bpf_map_lookup_elem(&fnat_missed, &zero);
	if (missed)
		*missed += 1;
	return XDP_PASS;
}

/* Whether the packet's destination is one of the local addresses. */
static __always_inline int fnat_is_laddr(const struct pkt *p)
{
	struct rvs_nh_key k = {};

	__builtin_memcpy(k.addr, p->daddr, 16);
	k.family = p->family;
	return bpf_map_lookup_elem(&fnat_laddrs, &k) != NULL;
}

/* ------------------------------------------------------- in xdp_fnat */

static __always_inline int addr16_eq(const __u8 *a, const __u8 *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;

	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3])) == 0;
}

/* The pool hash of the client tuple (source address folded by XOR of its
 * four 32-bit words as they lie in memory, little-endian; ports as on the
 * wire). */
static __always_inline __u32 fnat_hash(const struct pkt *p)
{
	__u32 w = p->saddr[0] ^ p->saddr[1] ^ p->saddr[2] ^ p->saddr[3];
	__u64 h = ((__u64)w << 32) | ((__u64)p->sport << 16) | p->dport;

	h = (h ^ RVS_FNAT_SEED) * RVS_FNAT_MUL;
	h ^= h >> 32;
	return (__u32)h;
}

/* Pick a (laddr, lport) for a new flow to real server `d` and claim it in
 * fnat_rev (BPF_NOEXIST: a pair a live flow to the same (RS, rport, proto)
 * holds is never handed out). Candidate i = hash + i * stride: address
 * index candidate % count, port min + (candidate / count) % range. 0 and
 * `rk` filled, or -1 (counted as exhausted). */
static __always_inline int fnat_alloc(const struct pkt *p, const struct rvs_dest *d, __u32 svc,
				      __u32 dest, __be16 rport, struct rvs_fnat_key *rk)
{
	struct rvs_fnat_stats *st = bpf_map_lookup_elem(&fnat_stats, &svc);
	struct rvs_fnat_pool *pool = bpf_map_lookup_elem(&fnat_pools, &svc);
	struct rvs_fnat rv = {};
	__u32 h, count, range, i;

	if (!pool || !pool->count || pool->count > RVS_FNAT_POOL_MAX ||
	    pool->family != p->family || pool->port_max < pool->port_min)
		goto exhausted;
	count = pool->count;
	range = (__u32)pool->port_max - pool->port_min + 1;
	__builtin_memcpy(rv.caddr, p->saddr, 16);
	__builtin_memcpy(rv.vaddr, p->daddr, 16);
	rv.cport = p->sport;
	rv.vport = p->dport;
	rv.svc = svc;
	rv.dest = dest;
	__builtin_memcpy(rk->raddr, d->addr, 16);
	rk->rport = rport;
	rk->proto = p->proto;
	rk->family = p->family;
	h = fnat_hash(p);
	for (i = 0; i < RVS_FNAT_PROBES; i++) {
		__u32 c = h + i * RVS_FNAT_STRIDE;
		__u32 a = (c % count) & (RVS_FNAT_POOL_MAX - 1);
		__u32 port = pool->port_min + (c / count) % range;

		__builtin_memcpy(rk->laddr, pool->addrs[a], 16);
		rk->lport = bpf_htons((__u16)port);
		if (bpf_map_update_elem(&fnat_rev, rk, &rv, BPF_NOEXIST) == 0) {
			if (st)
				st->allocated++;
			return 0;
		}
	}
exhausted:
	if (st)
		st->exhausted++;
	return -1;
}

/* fnat_rev's entry `rk` if it is this packet's flow (client side), else
 * NULL. */
static __always_inline struct rvs_fnat *fnat_rev_get(const struct rvs_fnat_key *rk,
						     const struct pkt *p)
{
	struct rvs_fnat *n = bpf_map_lookup_elem(&fnat_rev, rk);

	if (n && addr16_eq(n->caddr, (const __u8 *)p->saddr) &&
	    addr16_eq(n->vaddr, (const __u8 *)p->daddr) && n->cport == p->sport &&
	    n->vport == p->dport)
		return n;
	return NULL;
}

static __always_inline int fnat_rev_is(const struct rvs_fnat_key *rk, const struct pkt *p)
{
	return fnat_rev_get(rk, p) != NULL;
}

/* The TCP header's 32-bit word `w` (1: sequence, 2: acknowledgment) as it
 * lies on the wire; 0 when the frame is too short. */
static __always_inline __u32 fnat_tcp_word(struct xdp_md *ctx, const struct pkt *p, __u32 w)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l4 = p->l4off;
	__u32 *th;

	if (l4 > 18 + 60)
		return 0;
	barrier_var(l4);
	th = data + (l4 & 0x7f);
	if ((void *)(th + 5) > end)
		return 0;
	return w == 1 ? th[1] : th[2];
}

/* Count a TOA outcome (toa_insert's code, or TOA_OK) for service `svc`. */
static __always_inline void fnat_toa_count(__u32 svc, int rc)
{
	struct rvs_fnat_stats *st = bpf_map_lookup_elem(&fnat_stats, &svc);

	if (!st)
		return;
	if (rc == TOA_OK)
		st->toa_inserted++;
	else if (rc == TOA_ERR_NOROOM)
		st->toa_noroom++;
	else if (rc == TOA_ERR_MTU)
		st->toa_mtu++;
	else
		st->toa_error++;
}

/* The TOA on a client segment of flow `n` that acknowledges the real
 * server's SYN-ACK (see the head of this file). 0: go on (with or without
 * the option), -1: the frame is broken (drop). */
static __always_inline int fnat_toa(struct xdp_md *ctx, struct pkt *p, const struct rvs_fnat *n,
				    __u32 svc)
{
	struct rvs_config *cfg;
	__u32 zero = 0, caddr[4];
	__u16 mtu = 0xffff;
	int rc;

	if (p->proto != IPPROTO_TCP || !n->toa_ack || (p->tcpflags & (TCPF_SYN | TCPF_RST)) ||
	    !(p->tcpflags & TCPF_ACK) || fnat_tcp_word(ctx, p, 2) != n->toa_ack)
		return 0;
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (cfg && cfg->tun_mtu && cfg->tun_mtu < 0xffff)
		mtu = cfg->tun_mtu;
	__builtin_memcpy(caddr, n->caddr, 16);
	rc = toa_insert(ctx, p, p->family, caddr, n->cport, mtu);
	fnat_toa_count(svc, rc);
	return rc == TOA_ERR_MOVED ? -1 : 0;
}

static __always_inline int fnat_inbound(struct xdp_md *ctx, struct pkt *p, __u32 dest, __u32 svc)
{
	struct rvs_flow_key fk = {};
	struct rvs_fnat_key nk = {};
	struct rvs_fnat_key *rk;
	struct rvs_fnat *n = NULL;
	struct rvs_dest *d;
	__be16 rport;

	d = bpf_map_lookup_elem(&dests, &dest);
	if (!d || d->method != RVS_FWD_FNAT || d->family != p->family)
		return XDP_DROP;
	rport = d->port ? d->port : p->dport;
	__builtin_memcpy(fk.caddr, p->saddr, 16);
	__builtin_memcpy(fk.vaddr, p->daddr, 16);
	fk.cport = p->sport;
	fk.vport = p->dport;
	fk.proto = p->proto;
	fk.family = p->family;
	rk = bpf_map_lookup_elem(&fnat_fwd, &fk);
	if (rk && addr16_eq(rk->raddr, d->addr) && rk->rport == rport &&
	    (n = fnat_rev_get(rk, p))) {
		__builtin_memcpy(&nk, rk, sizeof(nk));
		if (fnat_toa(ctx, p, n, svc))
			return XDP_DROP;
	} else {
		/* A new flow, or one rescheduled to another real server (its
		 * old pair is given back), or one whose pair was lost. */
		if (fnat_alloc(p, d, svc, dest, rport, &nk))
			return XDP_DROP;
		if (rk && fnat_rev_is(rk, p))
			bpf_map_delete_elem(&fnat_rev, rk);
		bpf_map_update_elem(&fnat_fwd, &fk, &nk, BPF_ANY);
	}
	{
		__u32 laddr[4], raddr[4];

		__builtin_memcpy(laddr, nk.laddr, 16);
		__builtin_memcpy(raddr, nk.raddr, 16);
		if (rewrite_addr_port(ctx, p, 0, laddr, nk.lport) ||
		    rewrite_addr_port(ctx, p, 1, raddr, nk.rport))
			return XDP_DROP;
		return fib_out(ctx, p, raddr, laddr);
	}
}

/* On the real server's segments: a SYN-ACK arms the TOA for the client's
 * segments that acknowledge it and gets its MSS lowered by the TOA's length;
 * any later segment disarms it (see the head of this file). */
static __always_inline void fnat_toa_reply(struct xdp_md *ctx, const struct pkt *p,
					   struct rvs_fnat *n)
{
	struct rvs_fnat_stats *st;
	__u32 svc = n->svc;

	if (p->proto != IPPROTO_TCP)
		return;
	if ((p->tcpflags & (TCPF_SYN | TCPF_ACK)) != (TCPF_SYN | TCPF_ACK)) {
		if (n->toa_ack)
			n->toa_ack = 0;
		return;
	}
	n->toa_ack = bpf_htonl(bpf_ntohl(fnat_tcp_word(ctx, p, 1)) + 1);
	if (toa_mss_clamp(ctx, p, p->family == RVS_AF_INET ? TOA_LEN4 : TOA_LEN6) == TOA_OK) {
		st = bpf_map_lookup_elem(&fnat_stats, &svc);
		if (st)
			st->mss_clamped++;
	}
}

static __always_inline int fnat_reply(struct xdp_md *ctx, const struct pkt *p)
{
	struct rvs_fnat_key rk = {};
	struct rvs_fnat *n;
	struct rvs_flow *f;
	__u32 caddr[4], vaddr[4];
	__be16 cport, vport;

	__builtin_memcpy(rk.raddr, p->saddr, 16);
	__builtin_memcpy(rk.laddr, p->daddr, 16);
	rk.rport = p->sport;
	rk.lport = p->dport;
	rk.proto = p->proto;
	rk.family = p->family;
	n = bpf_map_lookup_elem(&fnat_rev, &rk);
	if (!n)
		return XDP_PASS;
	fnat_toa_reply(ctx, p, n);
	__builtin_memcpy(caddr, n->caddr, 16);
	__builtin_memcpy(vaddr, n->vaddr, 16);
	cport = n->cport;
	vport = n->vport;
	f = flow_lookup(p->family, caddr, vaddr, cport, vport, p->proto);
	/* The SYN-ACK of a flow still in the embryonic table. */
	if (!f && p->proto == IPPROTO_TCP)
		f = table_lookup(&embryonic4, &embryonic, p->family, caddr, vaddr, cport, vport,
				 p->proto);
	if (f) {
		f->last_seen = bpf_jiffies64();
		if (p->proto == IPPROTO_TCP) {
			__u8 old = f->state;

			f->state = tcp_next_state(old, p->tcpflags, DIR_OUTPUT);
			conns_move(f->dest, p->proto, old, f->state);
		}
		f->flags &= ~RVS_FLOW_F_NOOUTPUT;
	}
	count(&svc_stats, n->svc, p->l3len, 1, 0);
	count(&dest_stats, n->dest, p->l3len, 1, 0);
	/* Never the kernel's: it would answer for the local address (a RST
	 * to the real server). */
	if (dec_ttl(ctx, p))
		return XDP_DROP;
	if (rewrite_addr_port(ctx, p, 0, vaddr, vport) ||
	    rewrite_addr_port(ctx, p, 1, caddr, cport))
		return XDP_DROP;
	return fib_out(ctx, p, caddr, vaddr);
}

/* ------------------------------------------- ICMP errors (xdp_fnat) */

/* The smallest MTUs a lowered one stays at (RFC 791, RFC 8200). */
#define FNAT_MTU_MIN4 68
#define FNAT_MTU_MIN6 1280

/* Set the IPv6 address at `a` to `n`; `acc` plus the checksum change. */
static __always_inline __u32 fnat_addr6_set(__u32 *a, const __u32 *n, __u32 acc)
{
	int i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		acc = csum_acc32(acc, a[i], n[i]);
		a[i] = n[i];
	}
	return acc;
}

/* Rewrite the ICMP error `p` (its quote parsed by parse_icmp_error): the
 * outer source and destination become `osrc`, `odst`, the quoted packet's
 * source and destination `qsrc`:`qsport`, `qdst`:`qdport` (addresses 16
 * bytes, IPv4 in the first word), a frag-needed / packet-too-big MTU is
 * lowered by `mtu_less` (0: kept); every checksum fixed incrementally: the outer IPv4 header's,
 * the quoted IPv4 header's, the quoted TCP/UDP checksum when the quote
 * holds it (a zero IPv4 UDP checksum stays zero), the ICMP checksum
 * (ICMPv6: with the outer addresses in its pseudo-header). Every bound is
 * checked before the first write. 0: done, 1: done and the MTU lowered,
 * -1: not rewritten (too short). */
static __always_inline int fnat_icmp_rewrite(struct xdp_md *ctx, const struct pkt *p,
					     const __u32 *osrc, const __u32 *odst,
					     const __u32 *qsrc, __be16 qsport, const __u32 *qdst,
					     __be16 qdport, __u32 mtu_less)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3off & 0xff, l4 = p->l4off & 0x1ff, il3 = (l4 + 8) & 0x3ff, il4;
	__u32 acc_in = 0;   /* quoted addresses: pseudo-header of the quoted L4 */
	__u32 acc_port = 0; /* the quoted ports */
	__u32 acc_icmp = 0; /* every word changed that the ICMP checksum covers */
	__u16 *l4check = NULL, *ports;
	__u8 *icmp = data + l4;
	int lowered = 0;

	if ((void *)(icmp + 8) > end)
		return -1;
	if (p->family == RVS_AF_INET) {
		struct iphdr *ip = data + l3;
		struct iphdr *iip = data + il3;
		__u32 acc_out;
		__u16 oldc;

		if ((void *)(ip + 1) > end || (void *)(iip + 1) > end)
			return -1;
		il4 = (il3 + (iip->ihl & 0xf) * 4) & 0x3ff;
		ports = data + il4;
		if ((void *)(ports + 2) > end)
			return -1;
		acc_out = csum_acc32(0, ip->saddr, osrc[0]);
		acc_out = csum_acc32(acc_out, ip->daddr, odst[0]);
		ip->check = csum_apply(ip->check, acc_out);
		ip->saddr = osrc[0];
		ip->daddr = odst[0];
		acc_in = csum_acc32(0, iip->saddr, qsrc[0]);
		acc_in = csum_acc32(acc_in, iip->daddr, qdst[0]);
		iip->saddr = qsrc[0];
		iip->daddr = qdst[0];
		oldc = iip->check;
		iip->check = csum_apply(oldc, acc_in);
		acc_icmp = acc_in + (__u16)~oldc + iip->check;
	} else {
		struct ipv6hdr *ip6 = data + l3;
		struct ipv6hdr *iip = data + il3;

		if ((void *)(ip6 + 1) > end || (void *)(iip + 1) > end)
			return -1;
		ports = (void *)(iip + 1);
		if ((void *)(ports + 2) > end)
			return -1;
		/* The outer addresses are in ICMPv6's pseudo-header. */
		acc_icmp = fnat_addr6_set((__u32 *)&ip6->saddr, osrc, 0);
		acc_icmp = fnat_addr6_set((__u32 *)&ip6->daddr, odst, acc_icmp);
		acc_in = fnat_addr6_set((__u32 *)&iip->saddr, qsrc, 0);
		acc_in = fnat_addr6_set((__u32 *)&iip->daddr, qdst, acc_in);
		acc_icmp += acc_in;
	}
	acc_port = csum_acc16(0, ports[0], qsport);
	acc_port = csum_acc16(acc_port, ports[1], qdport);
	ports[0] = qsport;
	ports[1] = qdport;
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = (void *)ports;

		if ((void *)(th + 1) <= end)
			l4check = &th->check;
	} else {
		struct udphdr *uh = (void *)ports;

		if ((void *)(uh + 1) <= end && (uh->check || p->family == RVS_AF_INET6))
			l4check = &uh->check;
	}
	acc_icmp += acc_port;
	if (l4check) {
		__u16 oldc = *l4check, newc = csum_apply(oldc, acc_in + acc_port);

		if (newc == 0 && p->proto == IPPROTO_UDP)
			newc = 0xffff;
		acc_icmp += (__u16)~oldc + newc;
		*l4check = newc;
	}
	if (mtu_less) {
		__u32 less = mtu_less;

		if (p->family == RVS_AF_INET && icmp[0] == 3 && icmp[1] == 4) {
			/* Fragmentation needed: the next-hop MTU (0 from a router
			 * older than RFC 1191: left alone). */
			__u16 *m = (__u16 *)(icmp + 6);
			__u16 old = *m;
			__u32 mtu = bpf_ntohs(old), nm;

			nm = mtu > FNAT_MTU_MIN4 + less ? mtu - less : FNAT_MTU_MIN4;
			if (mtu && nm < mtu) {
				*m = bpf_htons((__u16)nm);
				acc_icmp = csum_acc16(acc_icmp, old, *m);
				lowered = 1;
			}
		} else if (p->family == RVS_AF_INET6 && icmp[0] == 2) {
			/* Packet too big. */
			__u32 *m = (__u32 *)(icmp + 4);
			__u32 old = *m;
			__u32 mtu = bpf_ntohl(old), nm;

			nm = mtu > FNAT_MTU_MIN6 + less ? mtu - less : FNAT_MTU_MIN6;
			if (nm < mtu) {
				*m = bpf_htonl(nm);
				acc_icmp = csum_acc32(acc_icmp, old, *m);
				lowered = 1;
			}
		}
	}
	{
		__u16 *icheck = (__u16 *)(icmp + 2);

		*icheck = csum_apply(*icheck, acc_icmp);
	}
	return lowered;
}

/* RVS_FNAT_ICMP_IN: an error from the client's side about a reply
 * VIP:vport -> client:cport (`p` describes the flow as the client sends
 * it): to the real server from the local address, quoting RS:rport ->
 * laddr:lport as the real server sent it. */
static __always_inline int fnat_icmp_in(struct xdp_md *ctx, const struct pkt *p)
{
	struct rvs_flow_key fk = {};
	struct rvs_fnat_stats *st;
	struct rvs_fnat_key *rk;
	struct rvs_fnat *n;
	const __u32 *laddr, *raddr;
	__u32 svc, dest;

	__builtin_memcpy(fk.caddr, p->saddr, 16);
	__builtin_memcpy(fk.vaddr, p->daddr, 16);
	fk.cport = p->sport;
	fk.vport = p->dport;
	fk.proto = p->proto;
	fk.family = p->family;
	rk = bpf_map_lookup_elem(&fnat_fwd, &fk);
	if (!rk)
		return XDP_PASS;
	n = fnat_rev_get(rk, p);
	if (!n)
		return XDP_PASS;
	svc = n->svc;
	dest = n->dest;
	laddr = (const __u32 *)rk->laddr;
	raddr = (const __u32 *)rk->raddr;
	if (fnat_icmp_rewrite(ctx, p, laddr, raddr, raddr, rk->rport, laddr, rk->lport, 0) < 0)
		return XDP_PASS;
	count(&svc_stats, svc, p->l3len, 0, 0);
	count(&dest_stats, dest, p->l3len, 0, 0);
	st = bpf_map_lookup_elem(&fnat_stats, &svc);
	if (st)
		st->icmp_to_rs++;
	return fib_out(ctx, p, raddr, laddr);
}

/* RVS_FNAT_ICMP_OUT: an error to a local address about a packet laddr:lport
 * -> RS:rport (`p` describes it as the real server's reply would: RS ->
 * laddr): to the client from the VIP, quoting client:cport -> VIP:vport as
 * the client sent it; the MTU lowered while the flow's TOA is armed (see
 * the head of this file). */
static __always_inline int fnat_icmp_out(struct xdp_md *ctx, const struct pkt *p)
{
	struct rvs_fnat_key rk = {};
	struct rvs_fnat_stats *st;
	const __u32 *caddr, *vaddr;
	struct rvs_fnat *n;
	__u32 svc, dest, less = 0;
	int rc;

	__builtin_memcpy(rk.raddr, p->saddr, 16);
	__builtin_memcpy(rk.laddr, p->daddr, 16);
	rk.rport = p->sport;
	rk.lport = p->dport;
	rk.proto = p->proto;
	rk.family = p->family;
	n = bpf_map_lookup_elem(&fnat_rev, &rk);
	if (!n)
		return XDP_PASS;
	svc = n->svc;
	dest = n->dest;
	caddr = (const __u32 *)n->caddr;
	vaddr = (const __u32 *)n->vaddr;
	if (p->proto == IPPROTO_TCP && n->toa_ack)
		less = p->family == RVS_AF_INET ? TOA_LEN4 : TOA_LEN6;
	if (dec_ttl(ctx, p))
		return XDP_PASS;
	rc = fnat_icmp_rewrite(ctx, p, vaddr, caddr, caddr, n->cport, vaddr, n->vport, less);
	if (rc < 0)
		return XDP_PASS;
	count(&svc_stats, svc, p->l3len, 1, 0);
	count(&dest_stats, dest, p->l3len, 1, 0);
	st = bpf_map_lookup_elem(&fnat_stats, &svc);
	if (st) {
		st->icmp_to_client++;
		if (rc > 0)
			st->icmp_mtu_lowered++;
	}
	return fib_out(ctx, p, caddr, vaddr);
}

/* The body of xdp_fnat. */
static __always_inline int fnat_main(struct xdp_md *ctx)
{
	struct rvs_fnat_tmp *t;
	struct pkt p = {};
	__u32 zero = 0, kind, dest, svc;

	t = bpf_map_lookup_elem(&fnat_tmp, &zero);
	if (!t)
		return XDP_PASS;
	kind = t->kind;
	dest = t->dest;
	svc = t->svc;
	/* Consumed: a run not entered from xdp_lb finds nothing to do. */
	t->kind = 0;
	if (parse(ctx, &p))
		return XDP_PASS;
	if (p.icmp) {
		if (kind == RVS_FNAT_ICMP_IN)
			return fnat_icmp_in(ctx, &p);
		if (kind == RVS_FNAT_ICMP_OUT)
			return fnat_icmp_out(ctx, &p);
		return XDP_PASS;
	}
	if (kind == RVS_FNAT_INBOUND)
		return fnat_inbound(ctx, &p, dest, svc);
	if (kind == RVS_FNAT_REPLY)
		return fnat_reply(ctx, &p);
	return XDP_PASS;
}

#endif /* RVS_LIB_FNAT_H */
