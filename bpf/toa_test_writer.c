// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * toa_test_writer.c: a TEST FIXTURE, never loaded by rvsd. A sock_ops
 * program for the client's cgroup in the TOA tests: it writes a TOA (kind
 * 254) carrying the address in `toa_writer_addr[0]` into every SYN its
 * cgroup's sockets send, so the tests put a real option on the wire without
 * a FULLNAT director, and bpf/toa.c reads it as it would read a director's.
 *
 * On connect (TCP_CONNECT_CB) it asks for the header-option callbacks
 * (WRITE_HDR_OPT_CB_FLAG); HDR_OPT_LEN_CB reserves the option's bytes on a
 * SYN and WRITE_HDR_OPT_CB stores it. With `toa_writer_in_ack[0]` set, it
 * writes the TOA into every segment after the SYN instead (the handshake's
 * last ACK among them), where the Alibaba LVS and DPVS put it. Nothing is
 * written when the map holds no address (family 0).
 */
#include <linux/bpf.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "lib/map.h"

#include "toa.h"

/* TCPHDR_SYN / TCPHDR_ACK of skb_tcp_flags. */
#define FLAG_SYN 0x02
#define FLAG_ACK 0x10

char LICENSE[] SEC("license") = "Dual MIT/GPL";

RVS_MAP(toa_writer_addr, BPF_MAP_TYPE_ARRAY, 1, __u32, struct rvs_toa_addr);

RVS_MAP(toa_writer_in_ack, BPF_MAP_TYPE_ARRAY, 1, __u32, __u32);

/* Whether this segment gets the TOA: the SYN, or (in_ack) every other. */
static __always_inline int wanted(struct bpf_sock_ops *skops)
{
	__u32 zero = 0;
	__u32 *in_ack = bpf_map_lookup_elem(&toa_writer_in_ack, &zero);
	__u32 flags = skops->skb_tcp_flags;

	if (in_ack && *in_ack)
		return !(flags & FLAG_SYN);
	return (flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN;
}

SEC("sockops")
int rvs_toa_test_writer(struct bpf_sock_ops *skops)
{
	__u32 zero = 0;
	struct rvs_toa_addr *a = bpf_map_lookup_elem(&toa_writer_addr, &zero);

	if (!a || (a->family != AF_INET && a->family != AF_INET6))
		return 1;
	__u32 len = a->family == AF_INET ? RVS_TOA_LEN4 : RVS_TOA_LEN6;

	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
							 BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG);
		break;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		if (wanted(skops))
			bpf_reserve_hdr_opt(skops, len, 0);
		break;
	case BPF_SOCK_OPS_WRITE_HDR_OPT_CB:
		if (wanted(skops)) {
			__u8 opt[RVS_TOA_LEN6] = {};

			opt[0] = RVS_TOA_KIND;
			opt[1] = len;
			__builtin_memcpy(&opt[2], &a->port, 2);
			__builtin_memcpy(&opt[4], a->addr, 16);
			bpf_store_hdr_opt(skops, opt, len, 0);
		}
		break;
	}
	return 1;
}
