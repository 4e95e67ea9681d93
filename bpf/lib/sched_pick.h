// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/sched_pick.h: the schedulers both data planes run, written once: rr
 * and wrr (a shared cursor over the real-server list or the wrr cycle),
 * lc, wlc, sed, nq, fo and ovf (one walk over the list with the kernel's
 * comparisons), dh, and sh and mh with IPVS's fallback walks, over the
 * `slots` regions rvs-core's tables are written to. The director's
 * lib/sched.h (with twos, lblc, lblcr and persistence) and the sock
 * plane's sock_lb.c include it after defining what it reads:
 *  - SCHED_DEST: their real-server struct (it has a `weight`);
 *  - SCHED_LIST_MAX: the longest list a walk reads;
 *  - eligible(idx): the real server when a new flow may be given it, else
 *    NULL (RVS_SLOT_EMPTY is never eligible);
 *  - slot_at(pos): the `slots` value at pos, RVS_SLOT_EMPTY when none;
 *  - sched_cursor_of(key): the rr/wrr cursor of a service (a __u64 *);
 *  - dest_load(idx, &active, &inactive): its connections (the sock plane
 *    has open sockets only: inactive 0).
 * Each includer dispatches on its service's scheduler (rvs.h's
 * RVS_SCHED_*) to these. */
#ifndef RVS_LIB_SCHED_PICK_H
#define RVS_LIB_SCHED_PICK_H

#include "lib/hash.h"

/* rr over the real-server list, wrr over its precomputed sequence: a shared
 * cursor advanced atomically; ineligible entries are stepped over. */
struct walk {
	__u64 start;
	__u32 off;
	__u32 len;
	__u32 result;
	__u32 pad;
};

/* A walk's step over server `idx`: stop (1) at an eligible one, kept in
 * `*result`. */
static __always_inline long walk_take(__u32 idx, __u32 *result)
{
	if (!eligible(idx))
		return 0;
	*result = idx;
	return 1;
}

static long walk_step(__u32 i, void *ctx)
{
	struct walk *x = ctx;

	if (x->len == 0)
		return 1;
	return walk_take(slot_at(x->off + (__u32)((x->start + i) % x->len)), &x->result);
}

static __always_inline __u32 sched_cursor(__u32 cursor, __u32 off, __u32 len)
{
	__u64 *cur = sched_cursor_of(cursor);
	struct walk x = { .off = off, .len = len, .result = RVS_SLOT_EMPTY };
	__u32 idx;

	if (!cur || len == 0)
		return RVS_SLOT_EMPTY;
	x.start = __sync_fetch_and_add(cur, 1);
	/* The common case: the first candidate is eligible. */
	idx = slot_at(off + (__u32)(x.start % len));
	if (eligible(idx))
		return idx;
	bpf_loop(len < SCHED_LIST_MAX ? len : SCHED_LIST_MAX, walk_step, &x, 0);
	CALL_SITE_TAG(10);
	return x.result;
}

/* A fallback walk's step over table slot `idx`: stop (1) at an empty slot
 * (the end of the table) or at an eligible server, kept in `*result`. */
static __always_inline long fallback_take(__u32 idx, __u32 *result)
{
	if (idx == RVS_SLOT_EMPTY)
		return 1;
	return walk_take(idx, result);
}

/* The sh and mh fallback walks over a service's table at `table_off`:
 * sh's bucket (roff + ihash) & 255 for roff = off + ihash; mh's slot
 * hsiphash(roff + fold_port) % m for roff = (off + ihash) % m. */
struct fallback {
	__u32 table_off;
	__u32 ihash;
	__u32 result;
	__u32 m;         /* mh: the table's length */
	__u32 fold_port; /* mh: ntohs(port) + fold */
};

static long sh_fallback_step(__u32 off, void *ctx)
{
	struct fallback *x = ctx;
	__u32 roff = (off + x->ihash) & 0xff;
	__u32 idx = slot_at(x->table_off + ((roff + x->ihash) & 0xff));

	return fallback_take(idx, &x->result);
}

static long mh_fallback_step(__u32 off, void *c)
{
	struct fallback *x = c;
	__u32 roff, idx;

	if (x->m == 0)
		return 1;
	roff = (off + x->ihash) % x->m;
	idx = slot_at(x->table_off +
		      hsiphash_u32(RVS_MH_HASH1_KEY, roff + x->fold_port) % x->m);
	return fallback_take(idx, &x->result);
}

/* lc, wlc, sed, nq, fo, ovf: one pass over the real-server list with the kernel's
 * comparisons (ties to the earliest server). Products are u64: exact while
 * active*256+inactive < 2^40 and weights < 2^24. The walk runs in bpf_loop
 * so the verifier checks the body once, not once per server. */
struct least {
	__u32 off;
	__u8 sched;
	__u8 pad[3];
	__u32 best;
	__u64 best_cost;
	__u64 best_w;
};

static long least_step(__u32 i, void *ctx)
{
	struct least *x = ctx;
	SCHED_DEST *d;
	__u64 a = 0, in = 0, cost, w;
	__u32 idx = slot_at(x->off + i);

	d = eligible(idx);
	if (!d)
		return 0;
	dest_load(idx, &a, &in);
	w = d->weight;
	if (x->sched == RVS_SCHED_FO || x->sched == RVS_SCHED_OVF) {
		/* Highest weight wins, ties to the earliest; ovf only takes
		 * servers whose active connections do not exceed their weight. */
		if (x->sched == RVS_SCHED_OVF && a > w)
			return 0;
		if (x->best == RVS_SLOT_EMPTY || w > x->best_w) {
			x->best = idx;
			x->best_w = w;
		}
		return 0;
	}
	if (x->sched == RVS_SCHED_LC) {
		cost = (a << 8) + in;
		if (x->best == RVS_SLOT_EMPTY || cost < x->best_cost) {
			x->best = idx;
			x->best_cost = cost;
		}
		return 0;
	}
	if (x->sched == RVS_SCHED_NQ && a == 0) {
		x->best = idx;
		return 1;
	}
	if (x->sched == RVS_SCHED_WLC)
		cost = (a << 8) + in;
	else /* sed, nq */
		cost = a + 1;
	if (x->best == RVS_SLOT_EMPTY || x->best_cost * w > cost * x->best_w) {
		x->best = idx;
		x->best_cost = cost;
		x->best_w = w;
	}
	return 0;
}

/* A global function, like the director's twos, lblc and lblcr: the
 * verifier checks least_step's loop once here instead of once per caller
 * state; inlined, its callback's iterations took most of xdp_lb's 1M
 * instruction budget (Linux 6.18.44 refused the program). */
__noinline __u32 sched_least(__u32 off, __u32 len, __u32 sched)
{
	struct least x = {
		.best = RVS_SLOT_EMPTY,
	};

	if (len > SCHED_LIST_MAX)
		return RVS_SLOT_EMPTY;
	x.off = off;
	x.sched = sched;
	bpf_loop(len, least_step, &x, 0);
	CALL_SITE_TAG(11);
	return x.best;
}

/* dh: the bucket of the destination address (`daddr`, 16 bytes, network
 * order) in the service's 256-bucket table. */
static __always_inline __u32 sched_dh(__u32 table_off, __u32 table_len, const __u32 *daddr,
				      __u8 family)
{
	__u32 idx;

	if (table_len != (1u << RVS_DH_TAB_BITS))
		return RVS_SLOT_EMPTY;
	idx = slot_at(table_off + hash_32(addr_fold(daddr, family), RVS_DH_TAB_BITS));
	return eligible(idx) ? idx : RVS_SLOT_EMPTY;
}

/* sh: the bucket of the client's address (and port with sh-port,
 * `with_port`) in the 256-bucket table; with sh-fallback (`fallback`) an
 * unavailable bucket's server is replaced by IPVS's walk. */
static __always_inline __u32 sched_sh(__u32 table_off, __u32 table_len, int fallback,
				      int with_port, const __u32 *saddr, __u8 family,
				      __be16 sport)
{
	__u32 idx, fold, port, ihash;

	if (table_len != (1u << RVS_SH_TAB_BITS))
		return RVS_SLOT_EMPTY;
	fold = addr_fold(saddr, family);
	port = with_port ? bpf_ntohs(sport) : 0;
	ihash = hash_32(port + fold, RVS_SH_TAB_BITS);
	idx = slot_at(table_off + ihash);
	if (idx == RVS_SLOT_EMPTY || eligible(idx) || !fallback)
		return eligible(idx) ? idx : RVS_SLOT_EMPTY;
	{
		struct fallback x = {
			.table_off = table_off,
			.ihash = ihash,
			.result = RVS_SLOT_EMPTY,
		};

		bpf_loop(1u << RVS_SH_TAB_BITS, sh_fallback_step, &x, 0);
		CALL_SITE_TAG(12);
		return x.result;
	}
}

/* mh: the client's slot of the Maglev table (IPVS's hsiphash of its
 * address, and port with mh-port); with mh-fallback IPVS's walk. `table`
 * points at the service's table offset, followed by its length (both
 * planes' service structs have them adjacent: read through the pointer
 * after the hash, they cost the director's frame no spill slot). */
static __always_inline __u32 sched_mh(const __u32 *table, int fallback, int with_port,
				      const __u32 *saddr, __u8 family, __be16 sport)
{
	struct fallback x;
	__u32 idx, fold, port, ihash;

	if (table[1] == 0)
		return RVS_SLOT_EMPTY;
	fold = addr_fold(saddr, family);
	port = with_port ? bpf_ntohs(sport) : 0;
	ihash = hsiphash_u32(RVS_MH_HASH1_KEY, port + fold) % table[1];
	idx = slot_at(table[0] + ihash);
	if (idx == RVS_SLOT_EMPTY || eligible(idx) || !fallback)
		return eligible(idx) ? idx : RVS_SLOT_EMPTY;
	x.fold_port = port + fold;
	x.ihash = ihash;
	x.m = table[1];
	x.table_off = table[0];
	x.result = RVS_SLOT_EMPTY;
	bpf_loop(table[1], mh_fallback_step, &x, 0);
	CALL_SITE_TAG(13);
	return x.result;
}

#endif /* RVS_LIB_SCHED_PICK_H */
