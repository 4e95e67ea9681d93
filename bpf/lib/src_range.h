// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/src_range.h: a new flow's scheduling, behind the client source ranges
 * of its service (Kubernetes' loadBalancerSourceRanges; kube-proxy's IPVS
 * mode keeps them in an ipset). A service flagged RVS_SVC_F_SRC_RANGES
 * schedules a new flow only for a client inside one of its ranges
 * (src_ranges, an LPM trie keyed by service index and address); anything
 * else is refused (dropped, counted in svc_flood.refused). Services without
 * the flag pay one flag test; established flows never come here. */
#ifndef RVS_LIB_SRC_RANGE_H
#define RVS_LIB_SRC_RANGE_H

#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/stats.h"
#include "lib/sched.h"

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, RVS_SRC_RANGES_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rvs_src_key);
	__type(value, __u8);
} src_ranges SEC(".maps");

/* Per-CPU room for the trie's key (the stack is the main program's). */
RVS_MAP(src_key_tmp, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct rvs_src_key);

/* Whether the client of `p` may open a new flow of service `svc_idx`
 * (always, without RVS_SVC_F_SRC_RANGES); a refusal is counted. */
static __always_inline int src_allowed(const struct rvs_svc *s, __u32 svc_idx,
				       const struct pkt *p)
{
	struct rvs_src_key *k;
	__u32 zero = 0;

	if (!(s->flags & RVS_SVC_F_SRC_RANGES))
		return 1;
	k = bpf_map_lookup_elem(&src_key_tmp, &zero);
	if (!k)
		return 0;
	k->prefixlen = 32 + (p->family == RVS_AF_INET6 ? 128 : 32);
	k->svc = svc_idx;
	__builtin_memcpy(k->addr, p->saddr, 16);
	if (bpf_map_lookup_elem(&src_ranges, k))
		return 1;
	flood_count(svc_idx, refused);
	return 0;
}

/* The real-server index for a new flow of service `s` (persistent or not),
 * RVS_SLOT_EMPTY for none, RVS_SLOT_REFUSED for a client outside its
 * source ranges. */
static __always_inline __u32 schedule_new(const struct rvs_svc *s, __u32 svc_idx,
					  const struct pkt *p, __be16 svc_port,
					  const struct rvs_config *cfg, __u64 now)
{
	if (!src_allowed(s, svc_idx, p))
		return RVS_SLOT_REFUSED;
	if (s->flags & RVS_SVC_F_PERSISTENT)
		return schedule_persistent(s, svc_idx, p, svc_port, cfg, now);
	return schedule(s, svc_idx, p);
}

#endif /* RVS_LIB_SRC_RANGE_H */
