// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/stats.h: per-CPU packet, byte and connection counters, and the
 * SYN-flood counters. */
#ifndef RVS_LIB_STATS_H
#define RVS_LIB_STATS_H

#include "lib/maps.h"

/* ---------------------------------------------------------------- stats */

static __always_inline void count(void *map, __u32 idx, __u32 bytes, int out, int conn)
{
	struct rvs_stats *st = bpf_map_lookup_elem(map, &idx);

	if (!st)
		return;
	if (out) {
		st->outpkts++;
		st->outbytes += bytes;
	} else {
		st->inpkts++;
		st->inbytes += bytes;
	}
	st->conns += conn;
}

/* Add 1 to `field` of service `svc`'s SYN-flood counters (svc_flood; a
 * macro: one body for the four fields). */
#define flood_count(svc, field)                                                        \
	do {                                                                           \
		__u32 _i = (svc);                                                      \
		struct rvs_svc_flood *_c = bpf_map_lookup_elem(&svc_flood, &_i);       \
		if (_c)                                                                \
			_c->field++;                                                   \
	} while (0)

#endif /* RVS_LIB_STATS_H */
