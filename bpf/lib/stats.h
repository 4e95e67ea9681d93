// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/stats.h: per-CPU packet, byte and connection counters. */
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

#endif /* RVS_LIB_STATS_H */
