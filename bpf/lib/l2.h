// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/l2.h: MAC rewrite and the way out (XDP_TX on the ingress
 * interface, else redirect). */
#ifndef RVS_LIB_L2_H
#define RVS_LIB_L2_H

#include "lib/common.h"

/* ---------------------------------------------------------- forwarding */

/* Copy a MAC address as three 16-bit words: a memcpy into the packed
 * struct ethhdr compiles to six byte loads and six byte stores. (Packet and
 * map value accesses need no alignment on the architectures the kernel
 * lets XDP do unaligned access on, x86-64 and arm64 among them.) */
static __always_inline void mac_copy(void *dst, const void *src)
{
	__u16 *d = dst;
	const __u16 *s = src;

	d[0] = s[0];
	d[1] = s[1];
	d[2] = s[2];
}

/* Send the (rewritten) frame out: XDP_TX on the ingress interface (source
 * MAC = the MAC the frame was sent to, i.e. ours), else redirect. */
static __always_inline int l2_out(struct xdp_md *ctx, const __u8 *dmac, const __u8 *smac,
				  __u32 ifindex)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	if (ifindex == 0 || ifindex == ctx->ingress_ifindex) {
		mac_copy(eth->h_source, eth->h_dest);
		mac_copy(eth->h_dest, dmac);
		return XDP_TX;
	}
	mac_copy(eth->h_source, smac);
	mac_copy(eth->h_dest, dmac);
	return bpf_redirect(ifindex, 0);
}

#endif /* RVS_LIB_L2_H */
