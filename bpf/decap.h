/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * decap.h: the ONE definition of the decapsulator's (decap.c) map keys,
 * values and constants, as rvs.h is the director's.
 *
 * The Rust mirrors in crates/xdp/src/decap.rs are checked against the BTF
 * of the compiled decap object (size, every member's offset, width and
 * signedness) and every RVS_* constant here against its Rust counterpart by
 * crates/xdp/tests/layout.rs, so a change here that is not made there fails
 * the tests. The rules of rvs.h apply: fixed-width integers, every padding
 * byte an explicit field, addresses as 16 bytes in network order.
 */
#ifndef RVS_DECAP_H
#define RVS_DECAP_H

#include <linux/types.h>

/* decap_vips: HASH key; value is a u8 (1). */
struct rvs_decap_vip {
	__u8 family; /* RVS_AF_* */
	__u8 pad0[3];
	__u8 addr[16]; /* network order; IPv4 in the first 4 bytes */
};

/* decap_config: ARRAY[0]. */
struct rvs_decap_config {
	__be16 gue_port;    /* UDP destination port of GUE; 0 = GUE off */
	__be16 geneve_port; /* UDP destination port of Geneve; 0 = Geneve off */
	__u32 pad1;
};

/* decap_vips entries (the kernel's hash map is sized at load). */
#define RVS_DECAP_MAX_VIPS 1024

/* decap_stats: PERCPU_ARRAY of u64 counters, indexed by: */
#define RVS_DECAP_IPIP 0    /* IPIP / IPv6-in-IPv6 packets stripped */
#define RVS_DECAP_GUE 1     /* GUE packets stripped */
#define RVS_DECAP_NOT_VIP 2 /* tunnel packets for another inner address: passed */
#define RVS_DECAP_BAD 3     /* tunnel packets with a bad inner header: passed */
#define RVS_DECAP_GRE 4     /* GRE packets stripped */
#define RVS_DECAP_GENEVE 5  /* Geneve packets stripped */
#define RVS_DECAP_NSTATS 6

#endif /* RVS_DECAP_H */
