// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/flow.h: the flow tables (flows4, flows), the embryonic tables of
 * half-open TCP flows (embryonic4, embryonic), and the flow tables' per-CPU
 * caches (flow_cache, flow6_cache) with the epochs that invalidate them. */
#ifndef RVS_LIB_FLOW_H
#define RVS_LIB_FLOW_H

#include "lib/maps.h"
#include "lib/parse.h"

/* ------------------------------------------------------------- flows */

#define FLOW_V4_BRANCH() CALL_SITE_TAG(4)
#define FLOW_V6_BRANCH() CALL_SITE_TAG(6)

/* Fill a zeroed flows4 key (16 bytes) of an IPv4 flow; `caddr`/`vaddr`
 * hold the address in their first word. */
static __always_inline void flow4_key(struct rvs_flow4_key *k, const __u32 *caddr,
				      const __u32 *vaddr, __be16 cport, __be16 vport, __u8 proto)
{
	__builtin_memcpy(k->caddr, caddr, 4);
	__builtin_memcpy(k->vaddr, vaddr, 4);
	k->cport = cport;
	k->vport = vport;
	k->proto = proto;
}

/* Fill a zeroed `flows` key (40 bytes) of an IPv6 flow. */
static __always_inline void flow6_key(struct rvs_flow_key *k, const __u32 *caddr,
				      const __u32 *vaddr, __be16 cport, __be16 vport, __u8 proto,
				      __u8 family)
{
	__builtin_memcpy(k->caddr, caddr, 16);
	__builtin_memcpy(k->vaddr, vaddr, 16);
	k->cport = cport;
	k->vport = vport;
	k->proto = proto;
	k->family = family;
}

/* A lookup in `m4` (IPv4, 16-byte key) or `m6` (IPv6, 40-byte key): the
 * flow tables or the embryonic tables. `caddr`/`vaddr` are 16-byte
 * addresses (IPv4 in the first word). */
static __always_inline struct rvs_flow *table_lookup(void *m4, void *m6, __u8 family,
						     const __u32 *caddr, const __u32 *vaddr,
						     __be16 cport, __be16 vport, __u8 proto)
{
	struct rvs_flow *f;

	if (family == RVS_AF_INET) {
		struct rvs_flow4_key k = {};

		flow4_key(&k, caddr, vaddr, cport, vport, proto);
		f = bpf_map_lookup_elem(m4, &k);
		FLOW_V4_BRANCH();
	} else {
		struct rvs_flow_key k = {};

		flow6_key(&k, caddr, vaddr, cport, vport, proto, family);
		f = bpf_map_lookup_elem(m6, &k);
		FLOW_V6_BRANCH();
	}
	return f;
}

/* Insert or replace (`del`: delete) the packet's entry in `m4`/`m6`; 0 on
 * success. */
static __always_inline long table_write(void *m4, void *m6, const struct pkt *p,
					const struct rvs_flow *v, int del)
{
	long rc;

	if (p->family == RVS_AF_INET) {
		struct rvs_flow4_key k = {};

		flow4_key(&k, p->saddr, p->daddr, p->sport, p->dport, p->proto);
		rc = del ? bpf_map_delete_elem(m4, &k) : bpf_map_update_elem(m4, &k, v, BPF_ANY);
		FLOW_V4_BRANCH();
	} else {
		struct rvs_flow_key k = {};

		flow6_key(&k, p->saddr, p->daddr, p->sport, p->dport, p->proto, p->family);
		rc = del ? bpf_map_delete_elem(m6, &k) : bpf_map_update_elem(m6, &k, v, BPF_ANY);
		FLOW_V6_BRANCH();
	}
	return rc;
}

/* The flow table of the family: flows4 (16-byte key) for IPv4, flows for
 * IPv6. */
static __always_inline struct rvs_flow *flow_lookup(__u8 family, const __u32 *caddr,
						    const __u32 *vaddr, __be16 cport,
						    __be16 vport, __u8 proto)
{
	return table_lookup(&flows4, &flows, family, caddr, vaddr, cport, vport, proto);
}

/* Insert or replace the packet's flow; 0 on success. */
static __always_inline long flow_insert(const struct pkt *p, const struct rvs_flow *v)
{
	return table_write(&flows4, &flows, p, v, 0);
}

/* The packet's entry in the embryonic table of its family (embryonic4,
 * embryonic: TCP flows between their SYN and the ACK that completes the
 * handshake; see rvs.h). */
static __always_inline struct rvs_flow *embryo_lookup(const struct pkt *p)
{
	return table_lookup(&embryonic4, &embryonic, p->family, p->saddr, p->daddr, p->sport,
			    p->dport, p->proto);
}

/* Insert or replace the packet's embryonic entry; 0 on success. */
static __always_inline long embryo_insert(const struct pkt *p, const struct rvs_flow *v)
{
	return table_write(&embryonic4, &embryonic, p, v, 0);
}

/* Move the packet's embryonic flow `f` (its handshake completed) to the
 * flow table; 0 on success (the embryonic entry is gone then). The copy is
 * taken first: `f` is not read after the delete. */
static __always_inline long embryo_promote(const struct pkt *p, const struct rvs_flow *f)
{
	struct rvs_flow v = *f;
	long rc = flow_insert(p, &v);

	if (rc == 0)
		table_write(&embryonic4, &embryonic, p, &v, 1);
	return rc;
}

/* ------------------------------------------------------- flow cache */

/* The flow cache's hash of an IPv4 flow key (the formula in rvs.h; the
 * Rust side computes the same). A few multiplies: collisions only cost a
 * cache miss. */
static __always_inline __u64 flow_cache_hash(const struct rvs_flow4_key *k)
{
	const __u64 *w = (const __u64 *)k;
	__u64 h = (w[0] ^ RVS_FLOW_CACHE_SEED) * RVS_FLOW_CACHE_MUL;

	h = (h ^ (h >> 32) ^ w[1]) * RVS_FLOW_CACHE_MUL;
	return h ^ (h >> 32);
}

static __always_inline __u32 flow_cache_slot(__u64 h)
{
	return (__u32)h & (RVS_FLOW_CACHE_SIZE - 1);
}

static __always_inline __u32 flow_epoch_slot(__u64 h)
{
	return (__u32)(h >> 16) & (RVS_FLOW_EPOCHS - 1);
}

/* The IPv6 cache's hash of a 40-byte flow key (the formula in rvs.h). */
static __always_inline __u64 flow6_cache_hash(const struct rvs_flow_key *k)
{
	const __u64 *w = (const __u64 *)k;
	__u64 h = (w[0] ^ RVS_FLOW_CACHE_SEED) * RVS_FLOW_CACHE_MUL;

	h = (h ^ (h >> 32) ^ w[1]) * RVS_FLOW_CACHE_MUL;
	h = (h ^ (h >> 32) ^ w[2]) * RVS_FLOW_CACHE_MUL;
	h = (h ^ (h >> 32) ^ w[3]) * RVS_FLOW_CACHE_MUL;
	h = (h ^ (h >> 32) ^ w[4]) * RVS_FLOW_CACHE_MUL;
	return h ^ (h >> 32);
}

static __always_inline __u32 flow6_cache_slot(__u64 h)
{
	return (__u32)h & (RVS_FLOW6_CACHE_SIZE - 1);
}

/* After a write to the packet's flow (insert, state change; IPv4 or IPv6):
 * bump its epoch slot, so every CPU's cache entry of that key (and of the
 * keys that share the slot) is invalid from now on. All CPUs share the
 * slot: atomic. The write comes first (x86: stores stay in order and the
 * locked add is a full barrier), and the cache is filled with the epoch read
 * before its flows4/flows lookup: a fill racing with this write is born
 * invalid. That read relies on x86 keeping loads in order too; a weakly
 * ordered CPU (arm64) would need it to be a load-acquire (BPF has one since
 * Linux 6.15). */
static __always_inline void flow_epoch_bump(const struct pkt *p)
{
	__u32 slot, *e;
	__u64 h;

	if (p->family == RVS_AF_INET) {
		struct rvs_flow4_key k __attribute__((aligned(8))) = {};

		flow4_key(&k, p->saddr, p->daddr, p->sport, p->dport, p->proto);
		h = flow_cache_hash(&k);
	} else {
		struct rvs_flow_key k __attribute__((aligned(8))) = {};

		flow6_key(&k, p->saddr, p->daddr, p->sport, p->dport, p->proto, p->family);
		h = flow6_cache_hash(&k);
	}
	slot = flow_epoch_slot(h);
	e = bpf_map_lookup_elem(&flow_epochs, &slot);
	CALL_SITE_TAG(20);
	if (e)
		__sync_fetch_and_add(e, 1);
}

#endif /* RVS_LIB_FLOW_H */
