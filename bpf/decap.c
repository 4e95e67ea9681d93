// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * decap.c: rvs's decapsulator for TUN real servers (XDP).
 *
 * The director's TUN method sends a client packet inside IPIP (IPv4 in IPv4,
 * protocol 4; IPv6 in IPv6, next header 41), inside GUE (outer UDP to the
 * configured port, then a 4-byte GUE header whose protocol field names the
 * inner packet), inside GRE (protocol 47, RFC 2784/2890: the protocol field
 * is the inner ethertype) or inside Geneve (outer UDP to the configured
 * port, 6081, RFC 8926). Kernels without the ipip/ip6_tunnel/fou/ip_gre/
 * geneve modules cannot receive them, so this program, attached to the real
 * server's interface,
 * strips the outer headers and passes the inner packet up the stack: the
 * kernel then delivers it to the VIP configured on `lo`, as if the client had
 * sent it directly.
 *
 * Only packets whose inner destination is one of this host's VIPs (the
 * `decap_vips` map, filled by `rvsd realserver`) are stripped; everything
 * else passes untouched, so the kernel judges it as it would without rvs.
 * Not stripped (passed): outer IPv4 fragments, IPv6 extension headers in the
 * outer header, GUE control messages (C bit) and unknown GUE versions,
 * GRE with the routing bit or a version other than 0 (1 is PPTP), Geneve
 * OAM frames (O bit), Geneve with critical options (C bit: rvs knows none)
 * and unknown Geneve versions, truncated headers. GUE variant 1 (direct IP:
 * the first nibble of the payload is the IP version, no GUE header) is
 * accepted as well. GRE's key and sequence fields (RFC 2890) and its
 * checksum are skipped, Geneve's non-critical options too; the checksums
 * are not verified here (the kernel still verifies the inner packet's).
 * The inner packet is IP (protocol 0x0800 / 0x86DD: what rvs's director
 * sends) or Ethernet carrying IP (0x6558, transparent Ethernet bridging: a
 * gretap device, Linux/OVN/Cilium Geneve), whose inner Ethernet header is
 * stripped with the rest.
 *
 * The program's map types are its own (it shares none with the director)
 * and live in decap.h; the Rust mirrors live in crates/xdp/src/decap.rs and
 * crates/xdp/tests/layout.rs checks them against this object's BTF.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "lib/map.h"

#include "rvs.h"
#include "decap.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

RVS_MAP(decap_vips, BPF_MAP_TYPE_HASH, RVS_DECAP_MAX_VIPS, struct rvs_decap_vip, __u8);

RVS_MAP(decap_config, BPF_MAP_TYPE_ARRAY, 1, __u32, struct rvs_decap_config);

RVS_MAP(decap_stats, BPF_MAP_TYPE_PERCPU_ARRAY, RVS_DECAP_NSTATS, __u32, __u64);

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&decap_stats, &which);

	if (c)
		*c += 1;
}

#define ETH_P_8021Q_ 0x8100
#define ETH_P_8021AD_ 0x88A8
#define MAX_L2 18
#define ETH_P_TEB_ 0x6558 /* transparent Ethernet bridging */
#define IPPROTO_GRE_ 47
/* Longest outer headers stripped before an inner Ethernet header: IPv4
 * with options, UDP and Geneve with 252 bytes of options (GUE: 4 + 124). */
#define MAX_OUTER (60 + 8 + 8 + 252)

SEC("xdp")
int rvs_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct rvs_decap_vip key = {};
	struct rvs_decap_config *cfg;
	__u32 zero = 0, l3off = sizeof(struct ethhdr), hdrs, kind;
	__u16 proto, ethertype = 0;
	__u8 l4proto, inner_proto = 0, l2[MAX_L2];
	__u8 *inner;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q_) || proto == bpf_htons(ETH_P_8021AD_)) {
		if (data + MAX_L2 > end)
			return XDP_PASS;
		proto = *(__be16 *)(data + 16);
		l3off = MAX_L2;
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + l3off;
		__u32 ihl;

		if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl < 5)
			return XDP_PASS;
		if (ip->frag_off & bpf_htons(0x3fff)) /* MF or an offset */
			return XDP_PASS;
		ihl = ip->ihl * 4;
		hdrs = ihl;
		l4proto = ip->protocol;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + l3off;

		if ((void *)(ip6 + 1) > end || ip6->version != 6)
			return XDP_PASS;
		hdrs = sizeof(struct ipv6hdr);
		l4proto = ip6->nexthdr;
	} else {
		return XDP_PASS;
	}
	if (l4proto == IPPROTO_IPIP || l4proto == IPPROTO_IPV6) {
		inner_proto = l4proto;
		kind = RVS_DECAP_IPIP;
	} else if (l4proto == IPPROTO_GRE_) {
		kind = RVS_DECAP_GRE;
	} else if (l4proto == IPPROTO_UDP) {
		struct udphdr *uh = data + l3off + hdrs;

		if ((void *)(uh + 1) > end)
			return XDP_PASS;
		cfg = bpf_map_lookup_elem(&decap_config, &zero);
		if (!cfg)
			return XDP_PASS;
		if (cfg->gue_port && uh->dest == cfg->gue_port)
			kind = RVS_DECAP_GUE;
		else if (cfg->geneve_port && uh->dest == cfg->geneve_port)
			kind = RVS_DECAP_GENEVE;
		else
			return XDP_PASS;
		hdrs += sizeof(struct udphdr);
	} else {
		return XDP_PASS;
	}

	if (kind == RVS_DECAP_GUE) {
		__u8 *gue = data + l3off + hdrs;

		if ((void *)(gue + 1) > end)
			return XDP_PASS;
		switch (gue[0] >> 6) {
		case 0: /* variant 0: ver(2) C(1) hlen(5), proto, flags(2) */
			if ((void *)(gue + RVS_GUE_HDR_LEN) > end)
				return XDP_PASS;
			if (gue[0] & 0x20) /* control message: not ours */
				return XDP_PASS;
			inner_proto = gue[1];
			hdrs += RVS_GUE_HDR_LEN + (gue[0] & 0x1f) * 4;
			break;
		case 1: /* variant 1: direct IP, the version nibble says which */
			inner_proto = (gue[0] >> 4) == 4 ? IPPROTO_IPIP : IPPROTO_IPV6;
			break;
		default:
			return XDP_PASS;
		}
	} else if (kind == RVS_DECAP_GRE) {
		__u8 *gre = data + l3off + hdrs;

		if ((void *)(gre + RVS_GRE_HDR_LEN) > end)
			return XDP_PASS;
		/* C R K S s Recur(3) | flags(5) ver(3): no routing, version 0. */
		if ((gre[0] & 0x40) || (gre[1] & 0x07))
			return XDP_PASS;
		ethertype = *(__be16 *)(gre + 2);
		hdrs += RVS_GRE_HDR_LEN;
		if (gre[0] & 0x80) /* checksum + reserved1 */
			hdrs += 4;
		if (gre[0] & 0x20) /* key (RFC 2890) */
			hdrs += 4;
		if (gre[0] & 0x10) /* sequence number (RFC 2890) */
			hdrs += 4;
	} else if (kind == RVS_DECAP_GENEVE) {
		__u8 *gnv = data + l3off + hdrs;

		if ((void *)(gnv + RVS_GENEVE_HDR_LEN) > end)
			return XDP_PASS;
		/* Ver(2) OptLen(6) | O C Rsvd(6) | protocol | VNI(24) Rsvd */
		if ((gnv[0] >> 6) != 0 || (gnv[1] & 0xc0))
			return XDP_PASS;
		ethertype = *(__be16 *)(gnv + 2);
		hdrs += RVS_GENEVE_HDR_LEN + (gnv[0] & 0x3f) * 4;
	}
	if (kind == RVS_DECAP_GRE || kind == RVS_DECAP_GENEVE) {
		if (ethertype == bpf_htons(ETH_P_TEB_)) {
			/* Inner Ethernet (no tag): its ethertype names the IP. */
			__u8 *ie;

			if (hdrs > MAX_OUTER)
				return XDP_PASS;
			ie = data + l3off + hdrs;
			if ((void *)(ie + sizeof(struct ethhdr)) > end) {
				count(RVS_DECAP_BAD);
				return XDP_PASS;
			}
			ethertype = *(__be16 *)(ie + 12);
			hdrs += sizeof(struct ethhdr);
		}
		if (ethertype == bpf_htons(ETH_P_IP)) {
			inner_proto = IPPROTO_IPIP;
		} else if (ethertype == bpf_htons(ETH_P_IPV6)) {
			inner_proto = IPPROTO_IPV6;
		} else {
			count(RVS_DECAP_BAD);
			return XDP_PASS;
		}
	}

	/* The inner header: only its version and destination are read here;
	 * the kernel validates the rest after XDP_PASS. */
	if (hdrs > MAX_OUTER + sizeof(struct ethhdr))
		return XDP_PASS;
	inner = data + l3off + hdrs;
	if (inner_proto == IPPROTO_IPIP) {
		if ((void *)(inner + sizeof(struct iphdr)) > end || (inner[0] >> 4) != 4) {
			count(RVS_DECAP_BAD);
			return XDP_PASS;
		}
		key.family = RVS_AF_INET;
		__builtin_memcpy(key.addr, inner + __builtin_offsetof(struct iphdr, daddr), 4);
		proto = bpf_htons(ETH_P_IP);
	} else if (inner_proto == IPPROTO_IPV6) {
		if ((void *)(inner + sizeof(struct ipv6hdr)) > end || (inner[0] >> 4) != 6) {
			count(RVS_DECAP_BAD);
			return XDP_PASS;
		}
		key.family = RVS_AF_INET6;
		__builtin_memcpy(key.addr, inner + __builtin_offsetof(struct ipv6hdr, daddr), 16);
		proto = bpf_htons(ETH_P_IPV6);
	} else {
		count(RVS_DECAP_BAD);
		return XDP_PASS;
	}
	if (!bpf_map_lookup_elem(&decap_vips, &key)) {
		count(RVS_DECAP_NOT_VIP);
		return XDP_PASS;
	}

	/* Strip: keep the L2 header (and its tag), with the inner ethertype. */
	if (l3off == sizeof(struct ethhdr)) {
		if (data + sizeof(struct ethhdr) > end)
			return XDP_PASS;
		__builtin_memcpy(l2, data, sizeof(struct ethhdr));
		*(__be16 *)(l2 + 12) = proto;
	} else {
		if (data + MAX_L2 > end)
			return XDP_PASS;
		__builtin_memcpy(l2, data, MAX_L2);
		*(__be16 *)(l2 + 16) = proto;
	}
	if (bpf_xdp_adjust_head(ctx, (int)hdrs))
		return XDP_PASS;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (l3off == sizeof(struct ethhdr)) {
		if (data + sizeof(struct ethhdr) > end)
			return XDP_DROP;
		__builtin_memcpy(data, l2, sizeof(struct ethhdr));
	} else {
		if (data + MAX_L2 > end)
			return XDP_DROP;
		__builtin_memcpy(data, l2, MAX_L2);
	}
	count(kind);
	return XDP_PASS;
}
