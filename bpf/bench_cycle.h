// SPDX-License-Identifier: MIT OR Apache-2.0
/* Benchmark builds only (RVS_BENCH_CYCLE_FLOWS; never in the production
 * director): every run of the program takes the next of N client keys, so
 * a repeated BPF_PROG_TEST_RUN of one frame measures a working set of N
 * flows instead of one flow repeated. The benchmark sets N and the step:
 * a stride coprime with N visits every key once per N runs, and a large one
 * makes successive runs hit unrelated keys (not neighbours in the order
 * the flows were created, which may sit side by side in memory). */
#ifndef RVS_BENCH_CYCLE_H
#define RVS_BENCH_CYCLE_H

#include "lib/map.h"

/* Key i is the client address 10.0.0.0 + i (N up to 2^24). */
#define RVS_BENCH_CYCLE_BASE 0x0a000000

/* Layout mirrored by the benchmark as [u32; 4]. */
struct rvs_bench_cycle {
	__u32 n;      /* keys in the cycle; 0 = off (the frame's own client) */
	__u32 stride; /* step between runs: < n, coprime with n */
	__u32 next;   /* the next run's key index (< n) */
	__u32 pad;
};

RVS_MAP(bench_cycle, BPF_MAP_TYPE_ARRAY, 1, __u32, struct rvs_bench_cycle);

/* This run's key index (advancing the cycle), or -1 when the cycle is off.
 * One writer: the benchmark runs on one CPU. */
static __always_inline long bench_cycle_next(void)
{
	struct rvs_bench_cycle *c;
	__u32 zero = 0, i, j;

	c = bpf_map_lookup_elem(&bench_cycle, &zero);
	if (!c || !c->n)
		return -1;
	i = c->next;
	j = i + c->stride;
	c->next = j >= c->n ? j - c->n : j;
	return i;
}

#endif
