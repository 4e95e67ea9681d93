// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/sched.h: the director's schedulers and persistence: rr, wrr, lc,
 * wlc, sed, nq, fo, ovf, sh, dh and mh from lib/sched_pick.h (over the
 * director's maps; the sock plane runs the same code over its own), twos,
 * lblc and lblcr here. */
#ifndef RVS_LIB_SCHED_H
#define RVS_LIB_SCHED_H

#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/hash.h"
#include "lib/tcp_state.h"

/* ----------------------------------------------------------- scheduling */

/* What lib/sched_pick.h reads, over the director's maps. */
#define SCHED_DEST struct rvs_dest
#define SCHED_LIST_MAX RVS_MAX_SVC_DESTS

static __always_inline struct rvs_dest *eligible(__u32 idx)
{
	struct rvs_dest *d;

	if (idx == RVS_SLOT_EMPTY)
		return NULL;
	d = bpf_map_lookup_elem(&dests, &idx);
	if (!d || d->weight == 0 ||
	    (d->flags & (RVS_DEST_F_UNAVAILABLE | RVS_DEST_F_OVERLOADED)))
		return NULL;
	return d;
}

static __always_inline __u32 slot_at(__u32 pos)
{
	__u32 *v = bpf_map_lookup_elem(&slots, &pos);

	return v ? *v : RVS_SLOT_EMPTY;
}

static __always_inline __u64 *sched_cursor_of(__u32 svc_idx)
{
	return bpf_map_lookup_elem(&rr_cursor, &svc_idx);
}

static __always_inline void dest_load(__u32 idx, __u64 *active, __u64 *inactive)
{
	struct rvs_dest_conns *c = bpf_map_lookup_elem(&dest_conns, &idx);

	if (c) {
		*active = c->active;
		*inactive = c->inactive;
	}
}

#include "lib/sched_pick.h"

/* ------------------------------------------- twos, lblc, lblcr (counters) */

/* twos, lblc and lblcr are global functions: the verifier checks each once
 * on its own (arguments may be NULL, hence the checks) instead of once per
 * call site and caller state, and their stack frames are their own (the
 * main program's is most of the 512 bytes). */

/* The connection overhead of dest `idx` (IPVS: active * 256 + inactive). */
static __always_inline __u64 dest_overhead(__u32 idx)
{
	struct rvs_dest_conns *c = bpf_map_lookup_elem(&dest_conns, &idx);

	if (!c)
		return 0;
	return ((__u64)c->active << 8) + c->inactive;
}

/* twos (ip_vs_twos.c): two draws r = rand % (total + 1) over the eligible
 * weights; each picks the first eligible server whose prefix sum of
 * eligible weights reaches max(r, 1). The second pick wins only when it is
 * strictly less loaded per weight. Two passes: the total, then the picks. */
struct twos {
	__u32 off;
	__u32 c1;
	__u32 c2;
	__u32 pad;
	__u64 total;
	__u64 t1;
	__u64 t2;
};

static long twos_total_step(__u32 i, void *ctx)
{
	struct twos *x = ctx;
	struct rvs_dest *d = eligible(slot_at(x->off + i));

	if (d)
		x->total += d->weight;
	return 0;
}

static long twos_pick_step(__u32 i, void *ctx)
{
	struct twos *x = ctx;
	__u32 idx = slot_at(x->off + i);
	struct rvs_dest *d = eligible(idx);

	if (!d)
		return 0;
	x->total += d->weight; /* now the running prefix sum */
	if (x->c1 == RVS_SLOT_EMPTY && x->total >= x->t1)
		x->c1 = idx;
	if (x->c2 == RVS_SLOT_EMPTY && x->total >= x->t2)
		x->c2 = idx;
	return x->c1 != RVS_SLOT_EMPTY && x->c2 != RVS_SLOT_EMPTY;
}

__noinline __u32 sched_twos(const struct rvs_svc *s)
{
	struct twos x = { .c1 = RVS_SLOT_EMPTY, .c2 = RVS_SLOT_EMPTY };
	struct rvs_dest *d1, *d2;
	__u64 r1, r2, w1, w2;

	if (!s || s->dests_len > RVS_MAX_SVC_DESTS)
		return RVS_SLOT_EMPTY;
	x.off = s->dests_off;
	bpf_loop(s->dests_len, twos_total_step, &x, 0);
	if (x.total == 0)
		return RVS_SLOT_EMPTY;
	r1 = bpf_get_prandom_u32() % (x.total + 1);
	r2 = bpf_get_prandom_u32() % (x.total + 1);
	x.t1 = r1 ? r1 : 1;
	x.t2 = r2 ? r2 : 1;
	x.total = 0;
	bpf_loop(s->dests_len, twos_pick_step, &x, 0);
	d1 = bpf_map_lookup_elem(&dests, &x.c1);
	d2 = bpf_map_lookup_elem(&dests, &x.c2);
	if (!d1 || !d2)
		return x.c1;
	w1 = d1->weight;
	w2 = d2->weight;
	return w2 * dest_overhead(x.c1) > w1 * dest_overhead(x.c2) ? x.c2 : x.c1;
}

static long locality_step(__u32 i, void *ctx)
{
	struct locality_pass *x;
	struct locality_scratch *sc;
	struct rvs_dest_conns *c;
	struct rvs_dest *d;
	__u64 a = 0, in = 0, cost, w;
	__u32 zero = 0, idx;
	int j;

	sc = bpf_map_lookup_elem(&locality_tmp, &zero);
	if (!sc)
		return 1;
	x = &sc->x;
	idx = slot_at(x->off + i);
	if (idx == RVS_SLOT_EMPTY)
		return 0;
	d = bpf_map_lookup_elem(&dests, &idx);
	if (!d)
		return 0;
	c = bpf_map_lookup_elem(&dest_conns, &idx);
	if (c) {
		a = c->active;
		in = c->inactive;
	}
	w = d->weight;
	if (a * 2 < w)
		x->half = 1;
#pragma unroll
	for (j = 0; j < RVS_LBLCR_SET_MAX; j++)
		if (j < x->count && sc->members[j] == idx)
			sc->found[j] = 1;
	if (w == 0 || (d->flags & (RVS_DEST_F_UNAVAILABLE | RVS_DEST_F_OVERLOADED)))
		return 0;
	cost = (a << 8) + in;
	if (x->best == RVS_SLOT_EMPTY || x->best_cost * w > cost * x->best_w) {
		x->best = idx;
		x->best_cost = cost;
		x->best_w = w;
	}
	return 0;
}

/* The kernel's is_overloaded (lblc's own sense): more active connections
 * than weight while some server of the service is less than half loaded. */
static __always_inline int locality_overloaded(__u32 idx, const struct rvs_dest *d, __u8 half)
{
	struct rvs_dest_conns *c = bpf_map_lookup_elem(&dest_conns, &idx);

	return c && c->active > d->weight && half;
}

/* The live locality entry of the packet's destination address, NULL when
 * absent or unused for the expiration time (the kernel's full check
 * deletes such entries every half hour; here they are gone at once). */
static __always_inline struct rvs_locality *
locality_entry(struct rvs_locality_key *k, __u32 svc_idx, const struct pkt *p,
	       const struct rvs_config *cfg, __u64 now)
{
	struct rvs_locality *e;

	k->svc = svc_idx;
	k->family = p->family;
	__builtin_memcpy(k->daddr, p->daddr, 16);
	e = bpf_map_lookup_elem(&locality, k);
	if (e && cfg->locality_expiration &&
	    now - e->lastuse >= (__u64)cfg->locality_expiration * cfg->hz)
		return NULL;
	return e;
}

/* What lblc and lblcr start with: the scratch, zeroed and set to walk
 * service `s`'s servers, the configuration in `*cfg` and the packet's live
 * locality entry in `*e` (locality_entry). NULL when the maps or the
 * service cannot be used. */
static __always_inline struct locality_scratch *
locality_begin(const struct rvs_svc *s, __u32 svc_idx, const struct pkt *p, __u64 now,
	       struct rvs_config **cfg, struct rvs_locality **e)
{
	struct locality_scratch *sc;
	__u32 zero = 0;

	if (!s || !p)
		return NULL;
	*cfg = bpf_map_lookup_elem(&config, &zero);
	sc = bpf_map_lookup_elem(&locality_tmp, &zero);
	if (!*cfg || !sc || s->dests_len > RVS_MAX_SVC_DESTS)
		return NULL;
	__builtin_memset(sc, 0, sizeof(*sc));
	sc->x.off = s->dests_off;
	sc->x.best = RVS_SLOT_EMPTY;
	*e = locality_entry(&sc->k, svc_idx, p, *cfg, now);
	return sc;
}

/* A new locality entry naming the WLC choice (sc->x.best), which it
 * returns: what a miss, or lblc's unusable server, leads to.
 * RVS_SLOT_EMPTY (and no entry) when there is no choice. */
static __always_inline __u32 locality_new(struct locality_scratch *sc, __u64 now)
{
	if (sc->x.best == RVS_SLOT_EMPTY)
		return RVS_SLOT_EMPTY;
	sc->ne.lastuse = now;
	sc->ne.lastmod = now;
	sc->ne.count = 1;
	sc->ne.members[0] = sc->x.best;
	bpf_map_update_elem(&locality, &sc->k, &sc->ne, BPF_ANY);
	return sc->x.best;
}

/* lblc (ip_vs_lblc.c): the cached server unless it is not eligible or
 * overloaded in lblc's sense; then, and on a miss, WLC over the service,
 * and the entry names that server. */
__noinline __u32 sched_lblc(const struct rvs_svc *s, __u32 svc_idx,
					const struct pkt *p)
{
	struct locality_scratch *sc;
	struct rvs_locality *e;
	struct rvs_config *cfg;
	struct rvs_dest *d;
	__u32 m;
	__u64 now = bpf_jiffies64();

	sc = locality_begin(s, svc_idx, p, now, &cfg, &e);
	if (!sc)
		return RVS_SLOT_EMPTY;
	if (e) {
		sc->x.count = 1;
		sc->members[0] = e->members[0];
	}
	bpf_loop(s->dests_len, locality_step, NULL, 0);
	if (e) {
		e->lastuse = now;
		m = sc->members[0];
		d = eligible(m);
		if (sc->found[0] && d && !locality_overloaded(m, d, sc->x.half))
			return m;
	}
	return locality_new(sc, now);
}

/* lblcr (ip_vs_lblcr.c): the WLC minimum of the set's eligible members
 * (set order, ties to the newest); a set unchanged for the expiration time
 * with more than one member first sheds its most loaded member (weight >
 * 0); if the minimum is missing or overloaded in lblc's sense, WLC over the
 * service picks a server, which joins the set at its head. A miss creates
 * the set with the WLC choice. Concurrent CPUs update a set in place
 * without a lock: a torn set is still a list of dest indexes, each checked
 * for membership before use. */
__noinline __u32 sched_lblcr(const struct rvs_svc *s, __u32 svc_idx,
					 const struct pkt *p)
{
	struct locality_scratch *sc;
	struct rvs_locality *e;
	struct rvs_config *cfg;
	struct rvs_dest *d;
	__u32 least = RVS_SLOT_EMPTY, most = RVS_LBLCR_SET_MAX, n;
	__u64 now = bpf_jiffies64(), lo = 0, lw = 0, mo = 0, mw = 0, o, w;
	int j, present = 0;

	sc = locality_begin(s, svc_idx, p, now, &cfg, &e);
	if (!sc)
		return RVS_SLOT_EMPTY;
	if (e) {
		sc->x.count = e->count < RVS_LBLCR_SET_MAX ? e->count : RVS_LBLCR_SET_MAX;
		__builtin_memcpy(sc->members, e->members, sizeof(sc->members));
	}
	bpf_loop(s->dests_len, locality_step, NULL, 0);
	if (!e)
		return locality_new(sc, now);
	e->lastuse = now;
	/* Minimum over eligible members, maximum over members of weight > 0
	 * (ip_vs_dest_set_min / _max), both in set order. */
#pragma unroll
	for (j = 0; j < RVS_LBLCR_SET_MAX; j++) {
		__u32 m = sc->members[j];

		if (!sc->found[j])
			continue;
		d = bpf_map_lookup_elem(&dests, &m);
		if (!d || d->weight == 0)
			continue;
		o = dest_overhead(m);
		w = d->weight;
		if (most == RVS_LBLCR_SET_MAX || mo * w < o * mw) {
			most = j;
			mo = o;
			mw = w;
		}
		if (d->flags & (RVS_DEST_F_UNAVAILABLE | RVS_DEST_F_OVERLOADED))
			continue;
		if (least == RVS_SLOT_EMPTY || lo * w > o * lw) {
			least = m;
			lo = o;
			lw = w;
		}
	}
	n = sc->x.count;
	if (n > 1 && most < RVS_LBLCR_SET_MAX && cfg->locality_expiration &&
	    now - e->lastmod > (__u64)cfg->locality_expiration * cfg->hz) {
		/* Shift the members after `most` down by one. */
#pragma unroll
		for (j = 0; j < RVS_LBLCR_SET_MAX - 1; j++)
			if (j >= most)
				e->members[j] = e->members[j + 1];
		e->count = n - 1;
		e->lastmod = now;
	}
	if (least != RVS_SLOT_EMPTY) {
		d = bpf_map_lookup_elem(&dests, &least);
		if (d && !locality_overloaded(least, d, sc->x.half))
			return least;
	}
	if (sc->x.best == RVS_SLOT_EMPTY)
		return RVS_SLOT_EMPTY;
	n = e->count < RVS_LBLCR_SET_MAX ? e->count : RVS_LBLCR_SET_MAX;
#pragma unroll
	for (j = 0; j < RVS_LBLCR_SET_MAX; j++)
		if (j < n && e->members[j] == sc->x.best)
			present = 1;
	if (!present) {
#pragma unroll
		for (j = RVS_LBLCR_SET_MAX - 1; j > 0; j--)
			e->members[j] = e->members[j - 1];
		e->members[0] = sc->x.best;
		e->count = n < RVS_LBLCR_SET_MAX ? n + 1 : RVS_LBLCR_SET_MAX;
		e->lastmod = now;
	}
	return sc->x.best;
}

/* The real-server index for a new flow, RVS_SLOT_EMPTY for none. */
static __always_inline __u32 schedule(const struct rvs_svc *s, __u32 svc_idx,
				      const struct pkt *p)
{
	switch (s->sched) {
	case RVS_SCHED_RR:
		return sched_cursor(svc_idx, s->dests_off, s->dests_len);
	case RVS_SCHED_WRR:
		return sched_cursor(svc_idx, s->table_off, s->table_len);
	case RVS_SCHED_LC:
	case RVS_SCHED_WLC:
	case RVS_SCHED_SED:
	case RVS_SCHED_NQ:
	case RVS_SCHED_FO:
	case RVS_SCHED_OVF:
		return sched_least(s->dests_off, s->dests_len, s->sched);
	case RVS_SCHED_DH:
		return sched_dh(s->table_off, s->table_len, p->daddr, p->family);
	case RVS_SCHED_SH:
		return sched_sh(s->table_off, s->table_len, s->flags & RVS_SVC_F_SCHED1,
				s->flags & RVS_SVC_F_SCHED2, p->saddr, p->family, p->sport);
	case RVS_SCHED_MH:
		return sched_mh(&s->table_off, s->flags & RVS_SVC_F_SCHED1,
				s->flags & RVS_SVC_F_SCHED2, p->saddr, p->family, p->sport);
	case RVS_SCHED_TWOS:
		return sched_twos(s);
	case RVS_SCHED_LBLC:
		return sched_lblc(s, svc_idx, p);
	case RVS_SCHED_LBLCR:
		return sched_lblcr(s, svc_idx, p);
	default:
		return RVS_SLOT_EMPTY;
	}
}

/* Persistence (ip_vs_sched_persist): a live template of the client's
 * network (and the service's port: 0 for a port-zero service) names the
 * real server, unless that server was deleted (a
 * quiesced one keeps its clients, as with expire_quiescent_template = 0);
 * otherwise the scheduler chooses and a template is written. Templates are
 * refreshed by every new flow that uses them. */
static __always_inline __u32 schedule_persistent(const struct rvs_svc *s, __u32 svc_idx,
						 const struct pkt *p, __be16 svc_port,
						 const struct rvs_config *cfg, __u64 now)
{
	struct rvs_persist_key pk = {};
	struct rvs_persist nt = {};
	struct rvs_persist *t;
	__u32 mask[4], c[4], idx;
	int i;

	__builtin_memcpy(mask, s->persist_mask, 16);
#pragma unroll
	for (i = 0; i < 4; i++)
		c[i] = p->saddr[i] & mask[i];
	__builtin_memcpy(pk.caddr, c, 16);
	__builtin_memcpy(pk.vaddr, p->daddr, 16);
	/* A port-zero service's template covers all ports of the VIP (IPVS's
	 * <caddr, 0, vaddr, 0> template): the service's port, not the packet's. */
	pk.vport = svc_port;
	pk.proto = p->proto;
	pk.family = p->family;
	t = bpf_map_lookup_elem(&persist, &pk);
	if (t && t->svc == svc_idx && now - t->last_seen <= (__u64)s->persist_timeout * cfg->hz) {
		__u32 didx = t->dest;
		struct rvs_dest *d = bpf_map_lookup_elem(&dests, &didx);

		if (d && !(d->flags & RVS_DEST_F_UNAVAILABLE)) {
			t->last_seen = now;
			return didx;
		}
	}
	idx = schedule(s, svc_idx, p);
	if (idx == RVS_SLOT_EMPTY)
		return idx;
	nt.last_seen = now;
	nt.dest = idx;
	nt.svc = svc_idx;
	bpf_map_update_elem(&persist, &pk, &nt, BPF_ANY);
	return idx;
}

#endif /* RVS_LIB_SCHED_H */
