// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * toa_insert_test.c: a TEST FIXTURE, never loaded by rvsd. An XDP program
 * that parses the frame (lib/parse.h) and runs lib/toa_insert.h's
 * toa_insert or toa_mss_clamp on it with the configuration in
 * `toa_insert_cfg[0]`, so crates/xdp/tests/toa_insert.rs drives the
 * director's TOA insertion through BPF_PROG_TEST_RUN. The program returns
 * the function's code (TOA_OK, TOA_ERR_*, TOA_MSS_NONE; not an XDP
 * action), or TOA_TEST_NOT_PARSED when parse() did not take the frame.
 *
 * With op TOA_TEST_LIVE it is attached to an interface instead (the
 * real-kernel check: loopback of a test's namespace): it inserts the TOA
 * into every TCP segment to port `dport`, counts each code in
 * `toa_insert_codes` and passes every frame to the kernel.
 */
#include "lib/common.h"
#include "lib/parse.h"
#include "lib/toa_insert.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define TOA_TEST_INSERT 0
#define TOA_TEST_MSS_CLAMP 1
#define TOA_TEST_LIVE 2
#define TOA_TEST_NCODES 8
#define TOA_TEST_NOT_PARSED 99
#define TOA_TEST_BAD_CFG 98

/* What to do (mirrored by `ToaInsertCfg` in crates/xdp/src/toa.rs). */
struct toa_insert_cfg {
	__u8 op;      /* TOA_TEST_INSERT or TOA_TEST_MSS_CLAMP */
	__u8 family;  /* the client's: RVS_AF_INET / RVS_AF_INET6 */
	__be16 port;  /* the client's port, network order */
	__u32 addr[4]; /* the client's address, network order */
	__u16 mtu;    /* toa_insert's mtu */
	__u16 reduce; /* toa_mss_clamp's reduce */
	__be16 dport; /* TOA_TEST_LIVE: the segments to this port get it */
	__u16 pad;
};

RVS_MAP(toa_insert_cfg, BPF_MAP_TYPE_ARRAY, 1, __u32, struct toa_insert_cfg);

/* TOA_TEST_LIVE: how many segments got each code (index = code). */
RVS_MAP(toa_insert_codes, BPF_MAP_TYPE_PERCPU_ARRAY, TOA_TEST_NCODES, __u32, __u64);

SEC("xdp")
int rvs_toa_insert_test(struct xdp_md *ctx)
{
	struct pkt p = {};
	__u32 zero = 0;
	struct toa_insert_cfg *c = bpf_map_lookup_elem(&toa_insert_cfg, &zero);

	if (!c)
		return TOA_TEST_BAD_CFG;
	if (parse(ctx, &p))
		return c->op == TOA_TEST_LIVE ? XDP_PASS : TOA_TEST_NOT_PARSED;
	if (c->op == TOA_TEST_MSS_CLAMP)
		return toa_mss_clamp(ctx, &p, c->reduce);
	if (c->op == TOA_TEST_LIVE) {
		__u32 rc;
		__u64 *n;

		if (p.proto != IPPROTO_TCP || p.icmp || p.dport != c->dport)
			return XDP_PASS;
		rc = toa_insert(ctx, &p, c->family, c->addr, c->port, c->mtu);
		n = bpf_map_lookup_elem(&toa_insert_codes, &rc);
		if (n)
			*n += 1;
		return XDP_PASS;
	}
	if (c->op != TOA_TEST_INSERT)
		return TOA_TEST_BAD_CFG;
	return toa_insert(ctx, &p, c->family, c->addr, c->port, c->mtu);
}
