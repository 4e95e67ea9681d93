// SPDX-License-Identifier: MIT OR Apache-2.0
/* xdp_lb_cycle_miss.c: xdp_lb_cycle.c with every flow-cache entry born
 * stale (written as on any miss, with an expired stamp), so every
 * established packet misses the per-CPU cache and looks up flows4. Never
 * loaded outside the benchmark. */
#define RVS_HOOK_CACHE_STAMP(now) ((now) - RVS_FLOW_CACHE_JIFFIES)

#include "xdp_lb_cycle.c"
