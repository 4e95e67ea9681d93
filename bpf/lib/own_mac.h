// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/own_mac.h: act only on frames addressed to the director (own_macs in
 * rvs.h). */
#ifndef RVS_LIB_OWN_MAC_H
#define RVS_LIB_OWN_MAC_H

#include "lib/maps.h"

/* 1 when the frame is the director's to look at: sent to a MAC it owns on
 * the ingress interface (or the table is empty: never attached). 0 when it
 * belongs to the kernel: multicast or broadcast, too short for an Ethernet
 * header, or unicast to another host (counted in foreign_frames) — without
 * this, a frame flooded by a bridge would be forwarded again, with the
 * other host's MAC copied into the source on XDP_TX (duplicates and MAC
 * flapping between directors). The table is a global read with plain
 * loads (no map lookup) and the usual match is its first entry: a few
 * loads and compares per packet. */
static __always_inline int own_frame(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0, n, i, ifindex, lo;
	__u16 hi;
	__u64 *foreign;

	n = own_macs.count;
	if (n == 0)
		return 1;
	if (data + sizeof(struct ethhdr) > end)
		return 0;
	/* The I/G bit: group (multicast, broadcast) addresses. */
	if (*(__u8 *)data & 1)
		return 0;
	lo = *(__u32 *)data;
	hi = *(__u16 *)(data + 4);
	ifindex = ctx->ingress_ifindex;
	for (i = 0; i < RVS_OWN_MACS_MAX; i++) {
		if (i >= n)
			break;
		if (own_macs.e[i].ifindex == ifindex && *(__u32 *)own_macs.e[i].mac == lo &&
		    *(__u16 *)(own_macs.e[i].mac + 4) == hi)
			return 1;
	}
	foreign = bpf_map_lookup_elem(&foreign_frames, &zero);
	CALL_SITE_TAG(32);
	if (foreign)
		*foreign += 1;
	return 0;
}

#endif /* RVS_LIB_OWN_MAC_H */
