// SPDX-License-Identifier: MIT OR Apache-2.0
/* xdp_lb_probe.c: the director with one extra instruction that does
 * nothing, so its program tag differs from xdp_lb's while its maps are the
 * same: the restart tests' "upgrade to a build whose program differs"
 * (rvsd's hidden --xdp-upgrade-probe; built with the rvs-xdp feature
 * `upgrade-probe` only, never in a release build). */
#define RVS_HOOK_PARSED(p)                                                         \
	do {                                                                       \
		asm volatile("r0 = 0" ::: "r0");                                   \
	} while (0)

#include "xdp_lb.c"
