// SPDX-License-Identifier: MIT OR Apache-2.0
/* xdp_lb_cycle.c: the director cycling through N client keys, for the
 * many-flows established benchmark (xdp_bench; bench_cycle.h). Never loaded
 * outside the benchmark. Every run first writes the next key of the cycle
 * into the frame's client address, in the packet itself, so the fast path
 * and the general parse both see it (no checksum to fix: nothing checks
 * it). */
#define RVS_HOOK_ENTRY(ctx)                                                        \
	do {                                                                       \
		struct iphdr *ip_ = (void *)(long)(ctx)->data + sizeof(struct ethhdr); \
		long i_ = bench_cycle_next();                                      \
                                                                                   \
		CALL_SITE_TAG(30);                                                 \
		if (i_ >= 0 && (void *)(ip_ + 1) <= (void *)(long)(ctx)->data_end) \
			ip_->saddr = bpf_htonl(RVS_BENCH_CYCLE_BASE + (__u32)i_);  \
	} while (0)


#include "lib/common.h"
#include "bench_cycle.h"

#include "xdp_lb.c"
