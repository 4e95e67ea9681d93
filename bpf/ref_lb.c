// SPDX-License-Identifier: MIT OR Apache-2.0
/* The wire benchmark's reference balancer (scripts/bench-wire): the least a
 * direct-routing L4 balancer does per packet, to measure rvs's director
 * against on the same bed and traffic. Never loaded by rvsd.
 *
 * Parse Ethernet, IPv4 (no fragments) or IPv6 (no extension headers), TCP
 * or UDP; look the destination up in `ref_vips` (address, port, protocol:
 * anything else is passed to the stack); look the 5-tuple up in the per-CPU
 * LRU flow table `ref_flows`; on a miss hash the 5-tuple to one of
 * REF_REALS real servers and remember it; rewrite the destination MAC to
 * that real server's (`ref_reals`, DR: the VIP is on the real servers' lo)
 * and the source MAC to the director's (the frame's destination, since it
 * was sent to us); XDP_TX. Three maps, no counters, no state machine.
 *
 * With -DREF_PASS (ref_pass.o, program `ref_pass`): the floor, XDP_PASS
 * after nothing, so the kernel's own cost of running and timing a program
 * on that bed is measured the same way. */
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

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#ifdef REF_PASS

SEC("xdp")
int ref_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

#else

/* Real servers behind every VIP (the bed has three). */
#define REF_REALS 3
/* Flow table entries (per CPU). */
#define REF_FLOWS (1 << 20)

/* A service: address (IPv4 in addr[0]), port, protocol; network order. */
struct ref_vip {
	__u32 addr[4];
	__u16 port;
	__u8 proto;
	__u8 pad;
};

/* A flow: both addresses, both ports, protocol; network order. */
struct ref_flow {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* A real server: its MAC address. */
struct ref_real {
	__u8 mac[ETH_ALEN];
	__u8 pad[2];
};

RVS_MAP(ref_vips, BPF_MAP_TYPE_HASH, 16, struct ref_vip, __u32);
RVS_MAP(ref_flows, BPF_MAP_TYPE_LRU_PERCPU_HASH, REF_FLOWS, struct ref_flow, __u32);
RVS_MAP(ref_reals, BPF_MAP_TYPE_ARRAY, REF_REALS, __u32, struct ref_real);

/* Mixes one 32-bit word into the hash (multiply, rotate, multiply). */
static __always_inline __u32 ref_mix(__u32 h, __u32 w)
{
	w *= 0xcc9e2d51;
	w = (w << 15) | (w >> 17);
	h ^= w * 0x1b873593;
	h = (h << 13) | (h >> 19);
	return h * 5 + 0xe6546b64;
}

/* The flow's hash: each address folded to a word (IPv4 is word 0, the
 * others zero), the ports and the protocol mixed in, then an avalanche. */
static __always_inline __u32 ref_hash(const struct ref_flow *f)
{
	__u32 h = 0x2a;

	h = ref_mix(h, f->src[0] ^ f->src[1] ^ f->src[2] ^ f->src[3]);
	h = ref_mix(h, f->dst[0] ^ f->dst[1] ^ f->dst[2] ^ f->dst[3]);
	h = ref_mix(h, ((__u32)f->sport << 16) | f->dport);
	h = ref_mix(h, f->proto);
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	return h ^ (h >> 16);
}

SEC("xdp")
int ref_lb(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ref_flow flow = {};
	struct ref_vip vip = {};
	struct ref_real *real;
	void *l4;
	__u32 *idx, pick;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return XDP_PASS;
		/* Fragments carry no (or a partial) L4 header. */
		if (ip->frag_off & bpf_htons(0x3fff))
			return XDP_PASS;
		flow.src[0] = ip->saddr;
		flow.dst[0] = ip->daddr;
		flow.proto = ip->protocol;
		l4 = (void *)ip + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end)
			return XDP_PASS;
		__builtin_memcpy(flow.src, &ip6->saddr, 16);
		__builtin_memcpy(flow.dst, &ip6->daddr, 16);
		flow.proto = ip6->nexthdr;
		l4 = ip6 + 1;
	} else {
		return XDP_PASS;
	}
	if (flow.proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > end)
			return XDP_PASS;
		flow.sport = th->source;
		flow.dport = th->dest;
	} else if (flow.proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > end)
			return XDP_PASS;
		flow.sport = uh->source;
		flow.dport = uh->dest;
	} else {
		return XDP_PASS;
	}

	__builtin_memcpy(vip.addr, flow.dst, 16);
	vip.port = flow.dport;
	vip.proto = flow.proto;
	if (!bpf_map_lookup_elem(&ref_vips, &vip))
		return XDP_PASS;

	idx = bpf_map_lookup_elem(&ref_flows, &flow);
	if (idx) {
		pick = *idx;
	} else {
		pick = ref_hash(&flow) % REF_REALS;
		bpf_map_update_elem(&ref_flows, &flow, &pick, BPF_ANY);
	}
	real = bpf_map_lookup_elem(&ref_reals, &pick);
	if (!real)
		return XDP_ABORTED;

	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, real->mac, ETH_ALEN);
	return XDP_TX;
}

#endif /* REF_PASS */
