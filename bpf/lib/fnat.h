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
 * ICMP errors about FULLNAT flows are passed to the kernel (not translated
 * yet). */
#ifndef RVS_LIB_FNAT_H
#define RVS_LIB_FNAT_H

#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/flow.h"
#include "lib/stats.h"
#include "lib/tcp_state.h"
#include "lib/csum.h"
#include "lib/forward.h"

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

/* Whether fnat_rev's entry `rk` is this packet's flow (client side). */
static __always_inline int fnat_rev_is(const struct rvs_fnat_key *rk, const struct pkt *p)
{
	struct rvs_fnat *n = bpf_map_lookup_elem(&fnat_rev, rk);

	return n && addr16_eq(n->caddr, (const __u8 *)p->saddr) &&
	       addr16_eq(n->vaddr, (const __u8 *)p->daddr) && n->cport == p->sport &&
	       n->vport == p->dport;
}

static __always_inline int fnat_inbound(struct xdp_md *ctx, const struct pkt *p,
					__u32 dest, __u32 svc)
{
	struct rvs_flow_key fk = {};
	struct rvs_fnat_key nk = {};
	struct rvs_fnat_key *rk;
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
	if (rk && addr16_eq(rk->raddr, d->addr) && rk->rport == rport && fnat_rev_is(rk, p)) {
		__builtin_memcpy(&nk, rk, sizeof(nk));
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
	if (parse(ctx, &p) || p.icmp)
		return XDP_PASS;
	if (kind == RVS_FNAT_INBOUND)
		return fnat_inbound(ctx, &p, dest, svc);
	if (kind == RVS_FNAT_REPLY)
		return fnat_reply(ctx, &p);
	return XDP_PASS;
}

#endif /* RVS_LIB_FNAT_H */
