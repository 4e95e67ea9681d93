// SPDX-License-Identifier: MIT OR Apache-2.0
/* xdp_lb_bench.c: the director with a different client on every run, for
 * the new-flow benchmark (xdp_bench). Never loaded outside the benchmark.
 * A per-CPU counter changes the parsed client address and port after the
 * general parse, and the IPv4 fast path is skipped (its clients are new
 * flows). */
#define RVS_HOOK_PARSED(p)                                                         \
	do {                                                                       \
		__u32 zero_ = 0;                                                   \
		__u64 *seq_ = bpf_map_lookup_elem(&bench_seq, &zero_);             \
                                                                                   \
		if (seq_) {                                                        \
			*seq_ += 1;                                                \
			(p)->saddr[0] ^= bpf_htonl((__u32)*seq_ >> 16);            \
			(p)->sport ^= bpf_htons((__u16)*seq_);                     \
		}                                                                  \
	} while (0)
#define RVS_HOOK_FAST_PATH() return -1

#include "lib/common.h"

/* The per-CPU counter that makes every run a new client. */
RVS_MAP(bench_seq, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, __u64);

#include "xdp_lb.c"
