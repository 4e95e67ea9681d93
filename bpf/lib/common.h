// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/common.h: what every part of the director includes: the kernel and
 * libbpf headers, the shared layouts (rvs.h), the call-site tags and the
 * benchmark hooks (empty in the production program). */
#ifndef RVS_LIB_COMMON_H
#define RVS_LIB_COMMON_H


#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "lib/map.h"

#include "rvs.h"

/* Call-site tags. clang may merge calls of one helper from sibling branches
 * into one call taking the map or the callback in a register; the verifier
 * then cannot specialise that call: a map lookup is no longer inlined (the
 * kernel calls the map's lookup through a retpoline, ~+12 ns per packet
 * measured on the flow lookup) and a bpf_loop is no longer inlined (its
 * callback called through a retpoline on every iteration: wlc over 64
 * servers went from ~1150 to ~1750 ns). A one-instruction asm statement,
 * different for every call site, right after the call keeps the branches
 * apart (an empty asm would leave line info without an instruction). */
#define CALL_SITE_TAG(n)                                                           \
	do {                                                                       \
		__u64 tag_;                                                        \
		asm volatile("%0 = " #n : "=r"(tag_));                             \
	} while (0)

/* Hooks for the benchmark builds (bpf/xdp_lb_bench.c, bpf/xdp_lb_cycle*.c define them before they
 * include the director; here they expand to nothing, so the production
 * object holds no benchmark code):
 *  - RVS_HOOK_ENTRY(ctx): first thing of every run (the cycle builds
 *    rewrite the client address here);
 *  - RVS_HOOK_PARSED(p): after the general parse (the vary-client build
 *    changes the client here);
 *  - RVS_HOOK_FAST_PATH(): at the top of the IPv4 fast path (the
 *    vary-client build leaves it here: its clients are new flows);
 *  - RVS_HOOK_CACHE_STAMP(now): the stamp a flow-cache fill writes (the
 *    cache-miss build writes an expired one). */
#ifndef RVS_HOOK_ENTRY
#define RVS_HOOK_ENTRY(ctx) do {} while (0)
#endif
#ifndef RVS_HOOK_PARSED
#define RVS_HOOK_PARSED(p) do {} while (0)
#endif
#ifndef RVS_HOOK_FAST_PATH
#define RVS_HOOK_FAST_PATH() do {} while (0)
#endif
#ifndef RVS_HOOK_CACHE_STAMP
#define RVS_HOOK_CACHE_STAMP(now) (now)
#endif

#endif /* RVS_LIB_COMMON_H */
