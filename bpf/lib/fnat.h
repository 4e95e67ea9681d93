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
 * The established client packet without the tail call (fnat_established):
 * an IPv4 flow's pair is recorded in its flow entry (rvs_flow's
 * fnat_laddr/fnat_lport) by xdp_fnat once it has found it in fnat_fwd and
 * fnat_rev (or allocated it) on a packet that is not the flow's first
 * (fnat_record), or before that by the SYN-ACK that arms the TOA (the
 * handshake's ACK then takes xdp_fnat's path and checks it); xdp_lb
 * rewrites the flow's later packets itself with one checksum pass
 * (fnat_out4): no tail call, no second parse, no fnat_fwd/fnat_rev
 * look-up. fnat_fwd/fnat_rev stay the truth the allocator and the reply
 * path use; the record only mirrors them, and a flow entry written anew (a
 * new or rescheduled flow) has none until xdp_fnat records it again. The
 * control side's sync writes a synced flow's pair as this file would:
 * fnat_rev (only if free), fnat_fwd, then the record (plane.rs
 * load_synced). While the TOA is armed the flow carries RVS_FLOW_F_TOA
 * (set by the SYN-ACK in fnat_reply; cleared by the real server's next
 * segment, or by xdp_fnat when it finds toa_ack 0) and its client segments
 * take xdp_fnat's path, which inserts the TOA. IPv6 flows always take it
 * (no room in the flow entry for a 16-byte local address). What the
 * record relies on: fnat_rev is a plain hash (no eviction), so a live
 * flow's pair is only dropped with its flow (rvsd's report and sweep).
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

/* The pool hash of a client tuple and the prime whose residue steps the
 * walk over a pool's pairs (rvs_xdp::maps::fnat_candidate mirrors both:
 * the tests predict ports). The prime is above any pool's size (at most
 * RVS_FNAT_POOL_MAX * 65536 = 2^20 pairs), so its residue is coprime to
 * the size and the walk visits every pair once. */
#define RVS_FNAT_SEED 0x5256535f666e6174ull
#define RVS_FNAT_MUL 0x9e3779b97f4a7c15ull
#define RVS_FNAT_STEP_PRIME 2654435761u

/* ------------------------------------------------------- in xdp_lb */

/* Hand the packet to xdp_fnat with what xdp_lb found in the flow entry
 * (rec_*: see struct rvs_fnat_tmp); returns only when the tail call failed
 * (fnat_prog empty): the packet is passed and counted in fnat_missed. */
static __always_inline int fnat_enter_rec(struct xdp_md *ctx, __u32 kind, __u32 dest, __u32 svc,
					  __u8 rec_table, __be32 rec_laddr, __be16 rec_lport,
					  __u8 rec_flags)
{
	__u32 zero = 0;
	struct rvs_fnat_tmp *t = bpf_map_lookup_elem(&fnat_tmp, &zero);
	__u64 *missed;

	if (!t)
		return XDP_PASS;
	t->kind = kind;
	t->dest = dest;
	t->svc = svc;
	t->laddr = rec_laddr;
	t->lport = rec_lport;
	t->table = rec_table;
	t->flags = rec_flags;
	bpf_tail_call(ctx, &fnat_prog, RVS_FNAT_PROG);
	missed = bpf_map_lookup_elem(&fnat_missed, &zero);
	if (missed)
		*missed += 1;
	return XDP_PASS;
}

/* fnat_enter_rec for a packet whose pair xdp_fnat does not record (a new
 * flow's first packet, a reply). */
static __always_inline int fnat_enter(struct xdp_md *ctx, __u32 kind, __u32 dest, __u32 svc)
{
	return fnat_enter_rec(ctx, kind, dest, svc, RVS_FNAT_REC_NONE, 0, 0, 0);
}

/* Rewrite an IPv4 packet client:cport -> VIP:vport to laddr:lport ->
 * raddr:rport (one checksum pass for both pairs) and route it by the FIB:
 * what fnat_inbound does, for a flow whose pair is known. */
static __always_inline int fnat_out4(struct xdp_md *ctx, const struct pkt *p, __be32 laddr,
				     __be16 lport, __be32 raddr, __be16 rport)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3off & 0xff, l4 = p->l4off & 0x1ff;
	__u32 src[4] = {}, dst[4] = {};
	struct iphdr *ip = data + l3;
	__be16 *ports;
	__u32 acc;

	if ((void *)(ip + 1) > end)
		return XDP_DROP;
	acc = csum_acc32(0, ip->saddr, laddr);
	acc = csum_acc32(acc, ip->daddr, raddr);
	ip->check = csum_apply(ip->check, acc);
	ip->saddr = laddr;
	ip->daddr = raddr;
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = data + l4;

		if ((void *)(th + 1) > end)
			return XDP_DROP;
		ports = &th->source;
		acc = csum_acc16(acc, ports[0], lport);
		acc = csum_acc16(acc, ports[1], rport);
		th->check = csum_apply(th->check, acc);
	} else {
		struct udphdr *uh = data + l4;

		if ((void *)(uh + 1) > end)
			return XDP_DROP;
		ports = &uh->source;
		acc = csum_acc16(acc, ports[0], lport);
		acc = csum_acc16(acc, ports[1], rport);
		/* IPv4 UDP without checksum stays without one. */
		if (uh->check) {
			uh->check = csum_apply(uh->check, acc);
			if (uh->check == 0)
				uh->check = 0xffff;
		}
	}
	ports[0] = lport;
	ports[1] = rport;
	src[0] = laddr;
	dst[0] = raddr;
	return fib_out(ctx, p, dst, src);
}

/* A packet of an existing FULLNAT flow (its state and inbound stats done)
 * in xdp_lb: with its pair recorded in the flow entry (`laddr`, `lport`,
 * read from it before anything could free it; IPv4) and no TOA armed
 * (`flags`), rewritten and routed here, without the tail call and the
 * fnat_fwd and fnat_rev look-ups (the pair is the flow's until its entry
 * goes: xdp_fnat records it only after finding it in both, and a flow
 * rescheduled or written by the control side starts without one). Else
 * handed to xdp_fnat, which records the pair in the flow entry (in
 * `table`). */
static __always_inline int fnat_established(struct xdp_md *ctx, const struct pkt *p,
					    const struct rvs_dest *d, __u32 dest, __u32 svc,
					    __u8 table, __be32 laddr, __be16 lport, __u8 flags)
{
	if (lport && laddr && !(flags & RVS_FLOW_F_TOA) && p->family == RVS_AF_INET &&
	    d->family == RVS_AF_INET)
		return fnat_out4(ctx, p, laddr, lport, *(const __be32 *)d->addr,
				 d->port ? d->port : p->dport);
	return fnat_enter_rec(ctx, RVS_FNAT_INBOUND, dest, svc, table, laddr, lport,
			      flags & RVS_FLOW_F_TOA);
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

/* The walk over a pool's (laddr, lport) pairs for one new flow, one
 * candidate per bpf_loop step (verified once; a pool of 16 addresses has
 * 2^20 pairs). Pair j (0 <= j < size = count * range) is address
 * j % count, port port_min + j / count; the walk starts at the client
 * tuple's hash modulo size and steps by RVS_FNAT_STEP_PRIME modulo size
 * (coprime to it), so `size` steps visit every pair exactly once. */
struct fnat_walk {
	struct rvs_fnat_key rk; /* the candidate; the claimed pair at the end */
	struct rvs_fnat rv;     /* fnat_rev's value for the new flow */
	__u32 svc;
	__u32 j;    /* the current pair */
	__u32 step; /* RVS_FNAT_STEP_PRIME % size */
	__u32 size;
	__u32 count;
	__u32 port_min;
	__u32 probes; /* candidates looked at */
	int rc;       /* 0: claimed; -1: none free (or fnat_rev full) */
};

static long fnat_walk_step(__u32 i, void *arg)
{
	struct fnat_walk *w = arg;
	struct rvs_fnat_pool *pool;
	__u32 j = w->j, count = w->count, a;
	long err;

	if (!count || j >= w->size)
		return 1;
	pool = bpf_map_lookup_elem(&fnat_pools, &w->svc);
	if (!pool)
		return 1;
	w->probes++;
	a = (j % count) & (RVS_FNAT_POOL_MAX - 1);
	__builtin_memcpy(w->rk.laddr, pool->addrs[a], 16);
	w->rk.lport = bpf_htons((__u16)(w->port_min + j / count));
	j += w->step;
	if (j >= w->size)
		j -= w->size;
	w->j = j;
	/* Taken: the next pair (a lookup costs less than a refused insert). */
	if (bpf_map_lookup_elem(&fnat_rev, &w->rk))
		return 0;
	err = bpf_map_update_elem(&fnat_rev, &w->rk, &w->rv, BPF_NOEXIST);
	if (err == 0) {
		w->rc = 0;
		return 1;
	}
	/* Claimed on another CPU meanwhile: go on. Anything else (fnat_rev
	 * full: -E2BIG) ends the walk: no pair can be claimed now. */
	return err == -17 /* EEXIST */ ? 0 : 1;
}

/* Pick a (laddr, lport) for a new flow to real server `d` and claim it in
 * fnat_rev (a plain hash inserted with BPF_NOEXIST: a pair a live flow to
 * the same (RS, rport, proto) holds is never handed out, and nothing is
 * evicted). The walk (struct fnat_walk) tries every pair of the pool in
 * the worst case, so a new flow is refused only when every pair toward
 * this real server is held (or fnat_rev is full), or when a walk found
 * that less than a quarter second ago (fnat_full). 0 and `rk` filled, or
 * -1: refused, counted as exhausted when `count_it` (the first refusal of
 * this connection, see fnat_inbound). */
static __always_inline int fnat_alloc(const struct pkt *p, const struct rvs_dest *d, __u32 svc,
				      __u32 dest, __be16 rport, struct rvs_fnat_key *rk,
				      int count_it)
{
	struct rvs_fnat_stats *st = bpf_map_lookup_elem(&fnat_stats, &svc);
	struct rvs_fnat_pool *pool = bpf_map_lookup_elem(&fnat_pools, &svc);
	struct fnat_walk w = {};
	struct rvs_config *cfg;
	__u64 now, hold, *full;
	__u32 range, zero = 0;
	int held;

	w.rc = -1;
	__builtin_memcpy(rk->raddr, d->addr, 16);
	rk->rport = rport;
	rk->proto = p->proto;
	rk->family = p->family;
	if (!pool || !pool->count || pool->count > RVS_FNAT_POOL_MAX ||
	    pool->family != p->family || pool->port_max < pool->port_min || !pool->port_min)
		goto exhausted;
	w.count = pool->count;
	w.port_min = pool->port_min;
	range = (__u32)pool->port_max - pool->port_min + 1;
	w.size = w.count * range;
	w.step = RVS_FNAT_STEP_PRIME % w.size;
	w.j = fnat_hash(p) % w.size;
	w.svc = svc;
	__builtin_memcpy(w.rv.caddr, p->saddr, 16);
	__builtin_memcpy(w.rv.vaddr, p->daddr, 16);
	w.rv.cport = p->sport;
	w.rv.vport = p->dport;
	w.rv.svc = svc;
	w.rv.dest = dest;
	__builtin_memcpy(&w.rk, rk, sizeof(w.rk));
	/* The first candidate (free in a pool that is not nearly full: the
	 * common case costs no more than this), then the rest of the walk. */
	bpf_loop(1, fnat_walk_step, &w, 0);
	CALL_SITE_TAG(61);
	if (w.rc != 0 && w.size > 1) {
		/* A walk that found no free pair toward this real server is
		 * not repeated for a quarter second (fnat_full): new flows to
		 * it are refused at once meanwhile, as a full pool refuses them
		 * anyway. A full walk looks at every pair (up to 16 x 64,512),
		 * so this bounds what a SYN flood toward a full pool costs to
		 * one walk per quarter second per (service, real server); a
		 * client's resent SYN (after 1 s) walks again. `rk` (no local
		 * address or port yet) is the key, with the service in pad0. */
		now = bpf_jiffies64();
		cfg = bpf_map_lookup_elem(&config, &zero);
		hold = cfg && cfg->hz ? cfg->hz / 4 : 25;
		rk->pad0 = (__u16)svc;
		full = bpf_map_lookup_elem(&fnat_full, rk);
		CALL_SITE_TAG(77);
		held = full && now - *full < hold;
		if (!held) {
			bpf_loop(w.size - 1, fnat_walk_step, &w, 0);
			CALL_SITE_TAG(78);
			if (w.rc != 0)
				bpf_map_update_elem(&fnat_full, rk, &now, BPF_ANY);
		}
		rk->pad0 = 0;
	}
	if (w.rc == 0) {
		__builtin_memcpy(rk, &w.rk, sizeof(*rk));
		if (st) {
			st->allocated++;
			st->probes += w.probes;
		}
		return 0;
	}
exhausted:
	if (st) {
		st->probes += w.probes;
		if (count_it)
			st->exhausted++;
	}
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

/* Give pair `rk` back (fnat_rev's entry deleted). */
static __always_inline void fnat_free(const struct rvs_fnat_key *rk)
{
	bpf_map_delete_elem(&fnat_rev, rk);
}

/* A flow refused because fnat_fwd is full: counted as exhausted. */
static __always_inline void fnat_count_full(__u32 svc)
{
	struct rvs_fnat_stats *st = bpf_map_lookup_elem(&fnat_stats, &svc);

	if (st)
		st->exhausted++;
}

/* Record an IPv4 inbound flow's pair and TOA flag (`toa`: RVS_FLOW_F_TOA or
 * 0) in its flow entry (flows4 or embryonic4 as `table` says; only if it
 * still goes to `dest`), for fnat_established. lport is cleared first and
 * set last, so that a reader that finds it set finds the address written
 * with it (a reader racing a change of a recorded pair, which only a lost
 * pair causes, may mix the two for that one packet). */
static __always_inline void fnat_record(const struct pkt *p, __u8 table, __u32 dest,
					__be32 laddr, __be16 lport, __u8 toa)
{
	struct rvs_flow4_key k = {};
	struct rvs_flow *f;
	__u8 fl;

	flow4_key(&k, p->saddr, p->daddr, p->sport, p->dport, p->proto);
	if (table == RVS_FNAT_REC_EMBRYONIC) {
		f = bpf_map_lookup_elem(&embryonic4, &k);
		CALL_SITE_TAG(70);
	} else {
		f = bpf_map_lookup_elem(&flows4, &k);
		CALL_SITE_TAG(71);
	}
	if (!f || f->dest != dest)
		return;
	fl = f->flags;
	if ((fl & RVS_FLOW_F_TOA) != toa)
		f->flags = (fl & ~RVS_FLOW_F_TOA) | toa;
	if (f->fnat_lport == lport && f->fnat_laddr == laddr)
		return;
	*(volatile __be16 *)&f->fnat_lport = 0;
	*(volatile __be32 *)&f->fnat_laddr = laddr;
	*(volatile __be16 *)&f->fnat_lport = lport;
}

/* `rec_*`: what xdp_lb found in the flow entry and where to record
 * (struct rvs_fnat_tmp). */
static __always_inline int fnat_inbound(struct xdp_md *ctx, struct pkt *p, __u32 dest, __u32 svc,
					__u8 rec_table, __be32 rec_laddr, __be16 rec_lport,
					__u8 rec_flags)
{
	struct rvs_flow_key fk = {};
	struct rvs_fnat_key nk = {};
	struct rvs_fnat_key *rk;
	struct rvs_fnat *n = NULL;
	struct rvs_dest *d;
	__be16 rport;
	int same_rs;
	__u8 toa = 0;

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
	same_rs = rk && addr16_eq(rk->raddr, d->addr) && rk->rport == rport &&
		  rk->proto == p->proto;
	if (same_rs && rk->lport && (n = fnat_rev_get(rk, p))) {
		__builtin_memcpy(&nk, rk, sizeof(nk));
		if (n->toa_ack)
			toa = RVS_FLOW_F_TOA;
		if (fnat_toa(ctx, p, n, svc))
			return XDP_DROP;
	} else {
		/* A new flow, or one rescheduled to another real server (its
		 * old pair is given back), or one refused before (fnat_fwd
		 * holds its mark: lport 0, which no pool hands out, and the
		 * SYN's sequence number in laddr), or one whose pair was lost.
		 * A connection is counted as exhausted once, not per
		 * retransmitted SYN; a new connection on the same tuple (the
		 * client gave up and its port was chosen again) has another
		 * initial sequence number and is counted again. */
		int syn = p->proto == IPPROTO_TCP && (p->tcpflags & TCPF_SYN);
		__u32 tag = syn ? fnat_tcp_word(ctx, p, 1) : 0;
		int refused_before = same_rs && !rk->lport &&
				     (!syn || *(__u32 *)rk->laddr == tag);

		if (fnat_alloc(p, d, svc, dest, rport, &nk, !refused_before)) {
			if (rk && rk->lport && fnat_rev_is(rk, p))
				fnat_free(rk);
			if (!refused_before) {
				__builtin_memset(nk.laddr, 0, 16);
				__builtin_memcpy(nk.laddr, &tag, 4);
				nk.lport = 0;
				/* Fails only with fnat_fwd full: the next SYN
				 * is counted again. */
				bpf_map_update_elem(&fnat_fwd, &fk, &nk, BPF_ANY);
			}
			return XDP_DROP;
		}
		if (rk && rk->lport && fnat_rev_is(rk, p))
			fnat_free(rk);
		if (bpf_map_update_elem(&fnat_fwd, &fk, &nk, BPF_ANY)) {
			/* fnat_fwd full: the pair is given back, the flow
			 * refused (and counted: a full table is exhaustion). */
			fnat_free(&nk);
			fnat_count_full(svc);
			return XDP_DROP;
		}
	}
	/* Not from a SYN: its client has not seen the SYN-ACK that arms the
	 * TOA, and must not clear the flag that SYN-ACK may be setting. */
	if (rec_table != RVS_FNAT_REC_NONE && p->family == RVS_AF_INET &&
	    !(p->tcpflags & TCPF_SYN)) {
		__be32 la;

		__builtin_memcpy(&la, nk.laddr, 4);
		if (la != rec_laddr || nk.lport != rec_lport || toa != rec_flags)
			fnat_record(p, rec_table, dest, la, nk.lport, toa);
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

/* fnat_rev's entry for a packet the real server sent to a local address
 * (RS:rport -> laddr:lport), its key left in `rk`; NULL if none. */
static __always_inline struct rvs_fnat *fnat_rev_of_reply(const struct pkt *p,
							 struct rvs_fnat_key *rk)
{
	__builtin_memcpy(rk->raddr, p->saddr, 16);
	__builtin_memcpy(rk->laddr, p->daddr, 16);
	rk->rport = p->sport;
	rk->lport = p->dport;
	rk->proto = p->proto;
	rk->family = p->family;
	return bpf_map_lookup_elem(&fnat_rev, rk);
}

/* On the real server's segments: a SYN-ACK arms the TOA for the client's
 * segments that acknowledge it and gets its MSS lowered by the TOA's length;
 * any later segment disarms it (see the head of this file). 1: armed, -1:
 * not a SYN-ACK (disarmed if it was armed), 0: not TCP. */
static __always_inline int fnat_toa_reply(struct xdp_md *ctx, const struct pkt *p,
					  struct rvs_fnat *n)
{
	struct rvs_fnat_stats *st;
	__u32 svc = n->svc;

	if (p->proto != IPPROTO_TCP)
		return 0;
	if ((p->tcpflags & (TCPF_SYN | TCPF_ACK)) != (TCPF_SYN | TCPF_ACK)) {
		if (n->toa_ack)
			n->toa_ack = 0;
		return -1;
	}
	n->toa_ack = bpf_htonl(bpf_ntohl(fnat_tcp_word(ctx, p, 1)) + 1);
	if (toa_mss_clamp(ctx, p, p->family == RVS_AF_INET ? TOA_LEN4 : TOA_LEN6) == TOA_OK) {
		st = bpf_map_lookup_elem(&fnat_stats, &svc);
		if (st)
			st->mss_clamped++;
	}
	return n->toa_ack ? 1 : -1;
}

static __always_inline int fnat_reply(struct xdp_md *ctx, const struct pkt *p)
{
	struct rvs_fnat_key rk = {};
	struct rvs_fnat *n;
	struct rvs_flow *f;
	__u32 caddr[4], vaddr[4];
	__be16 cport, vport;
	int toa;

	n = fnat_rev_of_reply(p, &rk);
	if (!n)
		return XDP_PASS;
	toa = fnat_toa_reply(ctx, p, n);
	__builtin_memcpy(caddr, n->caddr, 16);
	__builtin_memcpy(vaddr, n->vaddr, 16);
	cport = n->cport;
	vport = n->vport;
	f = reply_flow(p, caddr, vaddr, cport, vport);
	if (f) {
		/* The flow's client segments take xdp_fnat's full path while
		 * the TOA is armed (fnat_established); disarmed, the flag goes
		 * only from the entry that recorded this pair (xdp_fnat also
		 * clears it when it finds the TOA disarmed). The SYN-ACK also
		 * records its pair in an IPv4 entry that has none, which saves
		 * xdp_fnat the flow look-up on the handshake's ACK: that ACK
		 * takes xdp_fnat's path (armed), which checks the pair against
		 * fnat_fwd/fnat_rev and records the right one if it differs. */
		if (toa > 0 && f->dest == n->dest) {
			f->flags |= RVS_FLOW_F_TOA;
			if (p->family == RVS_AF_INET && !f->fnat_lport) {
				*(volatile __be32 *)&f->fnat_laddr = p->daddr[0];
				*(volatile __be16 *)&f->fnat_lport = p->dport;
			}
		} else if (toa < 0 && (f->flags & RVS_FLOW_F_TOA) && p->family == RVS_AF_INET &&
			 f->fnat_lport == p->dport && f->fnat_laddr == p->daddr[0])
			f->flags &= ~RVS_FLOW_F_TOA;
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
	__u16 *ports;
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
	acc_icmp = quoted_l4_fix(p, (void *)ports, end, acc_in, acc_port, acc_icmp);
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
 * laddr:lport as the real server sent it. Not inlined (like fnat_icmp_out;
 * see fnat_inbound_call). */
static __noinline int fnat_icmp_in(struct xdp_md *ctx, const struct pkt *p)
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
static __noinline int fnat_icmp_out(struct xdp_md *ctx, const struct pkt *p)
{
	struct rvs_fnat_key rk = {};
	struct rvs_fnat_stats *st;
	const __u32 *caddr, *vaddr;
	struct rvs_fnat *n;
	__u32 svc, dest, less = 0;
	int rc;

	n = fnat_rev_of_reply(p, &rk);
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
/* xdp_fnat's paths as functions of their own (not inlined): each has its
 * own stack frame, so the program's deepest chain is fnat_main's small frame
 * plus one path's (the verifier sums the frames of a call chain against 512
 * bytes; inlined together they did not fit). `t` is fnat_tmp's entry, read
 * before fnat_main consumed its kind. */
static __noinline int fnat_inbound_call(struct xdp_md *ctx, struct pkt *p,
					const struct rvs_fnat_tmp *t)
{
	if (!t)
		return XDP_PASS;
	return fnat_inbound(ctx, p, t->dest, t->svc, t->table, t->laddr, t->lport, t->flags);
}

static __noinline int fnat_reply_call(struct xdp_md *ctx, const struct pkt *p)
{
	return fnat_reply(ctx, p);
}

static __always_inline int fnat_main(struct xdp_md *ctx)
{
	struct rvs_fnat_tmp *t;
	struct pkt p = {};
	__u32 zero = 0, kind;

	t = bpf_map_lookup_elem(&fnat_tmp, &zero);
	if (!t)
		return XDP_PASS;
	kind = t->kind;
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
		return fnat_inbound_call(ctx, &p, t);
	if (kind == RVS_FNAT_REPLY)
		return fnat_reply_call(ctx, &p);
	return XDP_PASS;
}

#endif /* RVS_LIB_FNAT_H */
