/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * dsr_rs.h: the ONE definition of the DSR real-server programs' (dsr_rs.c)
 * map keys, values and constants, as rvs.h is the director's. The Rust
 * mirrors live in crates/xdp/src/dsr_rs.rs and crates/xdp/tests/layout.rs
 * checks them against this object's BTF. The rules of rvs.h apply.
 */
#ifndef RVS_DSR_RS_H
#define RVS_DSR_RS_H

#include <linux/types.h>

/* dsr_flows: LRU_HASH key, a flow as it reaches the real server (after the
 * director's rewrite): client and real server (backend) address:port. */
struct rvs_dsr_key {
	__u8 caddr[16]; /* network order; IPv4 in the first 4 bytes */
	__u8 baddr[16];
	__be16 cport;
	__be16 bport;
	__u8 proto;
	__u8 family; /* RVS_AF_* */
	__u16 pad0;
};

/* dsr_flows value: the service address:port the option carried, the
 * replies' source. */
struct rvs_dsr_svc {
	__u8 addr[16];
	__be16 port;
	__u16 pad0;
};

/* dsr_flows entries: the least recently used flow goes first. */
#define RVS_DSR_RS_MAX_FLOWS 65536

/* dsr_stats: PERCPU_ARRAY of u64 counters, indexed by: */
#define RVS_DSR_RS_STRIPPED 0 /* packets whose option was recorded and removed */
#define RVS_DSR_RS_REPLIED 1  /* replies whose source became the service */
#define RVS_DSR_RS_MSS 2      /* SYN-ACKs whose MSS was lowered by the option's length */
#define RVS_DSR_RS_FAILED 3   /* option packets the kernel refused to shrink: passed as they were */
#define RVS_DSR_RS_NSTATS 4

#endif /* RVS_DSR_RS_H */
