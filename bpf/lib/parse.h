// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/parse.h: the parsed packet and the parser (Ethernet, one VLAN tag,
 * IPv4 / IPv6, TCP / UDP, ICMP errors about a flow). */
#ifndef RVS_LIB_PARSE_H
#define RVS_LIB_PARSE_H

#include "lib/common.h"

/* ------------------------------------------------------- parsed packet */

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

struct pkt {
	__u32 saddr[4]; /* network order, IPv4 in [0] */
	__u32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u16 l3len; /* IP total length: what IPVS counts as bytes */
	__u16 l3off; /* offset of the IP header from data */
	__u16 l4off; /* offset of the TCP/UDP header from data */
	__u8 family;
	__u8 proto;
	__u8 tcpflags;
	__u8 icmp; /* an ICMP error about a flow: the fields describe the flow */
	__u8 pad[2];
};

#define TCPF_FIN 0x01
#define TCPF_SYN 0x02
#define TCPF_RST 0x04
#define TCPF_ACK 0x10

/* An ICMP(v6) error (destination unreachable incl. fragmentation needed /
 * packet too big, time exceeded) quoting a packet our side sent (from the
 * VIP to a client): describe the flow it belongs to, as the client sent it,
 * so the error reaches the same real server (PMTU discovery for DR/TUN). */
static __always_inline int parse_icmp_error(struct pkt *p, void *l4, void *end)
{
	__u8 *ic = l4;
	void *inner = ic + 8;
	__be16 *ports;

	if ((void *)(ic + 8) > end)
		return -1;
	if (p->family == RVS_AF_INET) {
		struct iphdr *iip = inner;

		if (ic[0] != 3 && ic[0] != 11)
			return -1;
		if ((void *)(iip + 1) > end || iip->version != 4 || iip->ihl < 5)
			return -1;
		ports = inner + (iip->ihl & 0xf) * 4;
		p->proto = iip->protocol;
		p->saddr[0] = iip->daddr;
		p->daddr[0] = iip->saddr;
	} else {
		struct ipv6hdr *iip = inner;

		if (ic[0] != 1 && ic[0] != 2 && ic[0] != 3)
			return -1;
		if ((void *)(iip + 1) > end)
			return -1;
		ports = (void *)(iip + 1);
		p->proto = iip->nexthdr;
		__builtin_memcpy(p->saddr, &iip->daddr, 16);
		__builtin_memcpy(p->daddr, &iip->saddr, 16);
	}
	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return -1;
	if ((void *)(ports + 2) > end)
		return -1;
	p->sport = ports[1];
	p->dport = ports[0];
	p->icmp = 1;
	return 0;
}

/* Parse up to the ports. 0 = ours to look at, -1 = pass to the kernel. */
static __always_inline int parse(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *l3 = eth + 1;
	void *l4;
	__be16 proto;

	if (l3 > end)
		return -1;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_hdr *vh = l3;

		if ((void *)(vh + 1) > end)
			return -1;
		proto = vh->proto;
		l3 = vh + 1;
	}
	p->l3off = l3 - data;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;

		if ((void *)(ip + 1) > end)
			return -1;
		if (ip->version != 4 || ip->ihl < 5)
			return -1;
		/* MF set or a non-zero offset: a fragment. */
		if (ip->frag_off & bpf_htons(0x3fff))
			return -1;
		l4 = l3 + (ip->ihl & 0xf) * 4;
		p->family = RVS_AF_INET;
		p->proto = ip->protocol;
		p->l3len = bpf_ntohs(ip->tot_len);
		p->saddr[0] = ip->saddr;
		p->daddr[0] = ip->daddr;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > end)
			return -1;
		if (ip6->version != 6)
			return -1;
		l4 = ip6 + 1;
		p->family = RVS_AF_INET6;
		p->proto = ip6->nexthdr;
		p->l3len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		__builtin_memcpy(p->saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->daddr, &ip6->daddr, 16);
	} else {
		return -1;
	}
	p->l4off = l4 - data;
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > end)
			return -1;
		p->sport = th->source;
		p->dport = th->dest;
		p->tcpflags = ((__u8 *)th)[13];
	} else if (p->proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > end)
			return -1;
		p->sport = uh->source;
		p->dport = uh->dest;
	} else if ((p->family == RVS_AF_INET && p->proto == IPPROTO_ICMP) ||
		   (p->family == RVS_AF_INET6 && p->proto == IPPROTO_ICMPV6)) {
		return parse_icmp_error(p, l4, end);
	} else {
		return -1;
	}
	RVS_HOOK_PARSED(p);
	return 0;
}

#endif /* RVS_LIB_PARSE_H */
