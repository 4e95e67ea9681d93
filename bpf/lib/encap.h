// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/encap.h: TUN forwarding (IPIP, GUE) and the ICMP "too big" answer
 * for packets that do not fit the tunnel. */
#ifndef RVS_LIB_ENCAP_H
#define RVS_LIB_ENCAP_H

#include "lib/parse.h"
#include "lib/hash.h"
#include "lib/csum.h"
#include "lib/l2.h"

/* Hash of the flow for the GUE source port (receiver RSS spreads flows). */
static __always_inline __be16 flow_sport(const struct pkt *p)
{
	__u32 h = addr_fold(p->saddr, p->family) ^
		  (((__u32)bpf_ntohs(p->sport) << 16) | bpf_ntohs(p->dport));

	h = hash_32(h ^ p->proto, 32);
	return bpf_htons(0x8000 | (h >> 17));
}

/* The outer tunnel source: the configured address, or with tun_vary = n > 0
 * the configured prefix with its low n bits from the flow hash (high bits
 * of the same multiplicative hash as the GUE source port), so a real
 * server's RSS spreads flows over its queues (Katran varies the outer
 * source likewise). `w` is the address's last 32-bit word, network order. */
static __always_inline __be32 tun_source_word(__be32 w, __u8 vary, const struct pkt *p)
{
	__u32 h, mask;

	if (vary == 0)
		return w;
	if (vary > 32)
		vary = 32;
	h = addr_fold(p->saddr, p->family) ^
	    (((__u32)bpf_ntohs(p->sport) << 16) | bpf_ntohs(p->dport));
	h = hash_32(h ^ p->proto, 32);
	mask = vary >= 32 ? 0xffffffffu : (1u << vary) - 1;
	return bpf_htonl((bpf_ntohl(w) & ~mask) | (h >> (32 - vary)));
}

/* Answer a packet too big for the tunnel with ICMP "fragmentation needed"
 * (IPv4) / "packet too big" (IPv6) from the VIP to the client, quoting the
 * packet's IP header and 8 bytes, sent back out of the ingress interface
 * (the client's TCP then lowers its MSS, as with a router on the path). */
static __always_inline int icmp_too_big(struct xdp_md *ctx, const struct pkt *p, __u32 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l2len = p->l3off;
	__u32 quote = (__u32)(p->l4off - p->l3off) + 8; /* IP header + 8 */
	int v4 = p->family == RVS_AF_INET;
	__u32 push = v4 ? sizeof(struct iphdr) + 8 : sizeof(struct ipv6hdr) + 8;
	__u8 l2[18], mac[ETH_ALEN];
	long have = end - data;
	__u32 sum = 0, i, icmp_len;
	__u16 *w;
	void *ip;

	if (quote > 68 || (l2len != 14 && l2len != 18) || data + 18 > end)
		return XDP_DROP;
	__builtin_memcpy(l2, data, 18);
	/* Source MAC of the reply = the MAC the packet was sent to (ours). */
	__builtin_memcpy(mac, l2, ETH_ALEN);
	__builtin_memcpy(l2, l2 + ETH_ALEN, ETH_ALEN);
	__builtin_memcpy(l2 + ETH_ALEN, mac, ETH_ALEN);
	if (have > (long)(l2len + quote) && bpf_xdp_adjust_tail(ctx, -(int)(have - (l2len + quote))))
		return XDP_DROP;
	if (bpf_xdp_adjust_head(ctx, -(int)push))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + 18 > end)
		return XDP_DROP;
	__builtin_memcpy(data, l2, 18); /* 14: the quote is rewritten below */
	/* The reply is at least 14 + 28 + 28 bytes (IPv4) or 14 + 48 + 48
	 * (IPv6); constant offsets keep the verifier's bounds exact. */
	if (data + 18 + 48 > end)
		return XDP_DROP;
	if (l2len == 14)
		ip = data + 14;
	else
		ip = data + 18;
	icmp_len = 8 + quote;
	if (v4) {
		struct iphdr h = {};
		__u8 *ic;

		ic = ip + sizeof(struct iphdr);
		h.version = 4;
		h.ihl = 5;
		h.tot_len = bpf_htons(sizeof(struct iphdr) + icmp_len);
		h.ttl = RVS_TUN_TTL;
		h.protocol = IPPROTO_ICMP;
		h.saddr = p->daddr[0];
		h.daddr = p->saddr[0];
		h.check = ip4_csum(&h);
		__builtin_memcpy(ip, &h, sizeof(h));
		ic[0] = 3; /* destination unreachable */
		ic[1] = 4; /* fragmentation needed */
		ic[2] = 0;
		ic[3] = 0;
		*(__be16 *)(ic + 4) = 0;
		*(__be16 *)(ic + 6) = bpf_htons((__u16)mtu);
		w = (__u16 *)ic;
	} else {
		struct ipv6hdr *h = ip;
		__u8 *ic;

		ic = ip + sizeof(struct ipv6hdr);
		__builtin_memset(h, 0, sizeof(*h));
		h->version = 6;
		h->payload_len = bpf_htons(icmp_len);
		h->nexthdr = IPPROTO_ICMPV6;
		h->hop_limit = RVS_TUN_TTL;
		__builtin_memcpy(&h->saddr, p->daddr, 16);
		__builtin_memcpy(&h->daddr, p->saddr, 16);
		ic[0] = 2; /* packet too big */
		ic[1] = 0;
		ic[2] = 0;
		ic[3] = 0;
		*(__be32 *)(ic + 4) = bpf_htonl(mtu);
		/* Pseudo-header: addresses, length, next header. */
#pragma unroll
		for (i = 0; i < 4; i++)
			sum += (p->saddr[i] & 0xffff) + (p->saddr[i] >> 16) + (p->daddr[i] & 0xffff) +
			       (p->daddr[i] >> 16);
		sum += bpf_htons(icmp_len) + bpf_htons(IPPROTO_ICMPV6);
		w = (__u16 *)ic;
	}
	/* Checksum over the ICMP header and the quote (even length <= 76). */
	{
		__u16 *q = w;

		for (i = 0; i < 38; i++) {
			if (i * 2 >= icmp_len)
				break;
			if ((void *)(q + 1) > end)
				return XDP_DROP;
			sum += *q;
			q++;
		}
	}
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	w[1] = (__u16)~sum;
	return XDP_TX;
}

/* Encapsulate: IPIP (udp = 0) or GUE (udp = 1) in the family of the packet
 * (IPv4 in IPv4, IPv6 in IPv6), then send to the real server / next hop. */
static __always_inline int encap(struct xdp_md *ctx, const struct pkt *p,
				 const struct rvs_dest *d, const struct rvs_config *cfg, int udp)
{
	__u8 l2[18];
	__u32 l2len = p->l3off;
	__u32 outer_ip = p->family == RVS_AF_INET ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	__u32 hdrs = outer_ip + (udp ? sizeof(struct udphdr) + RVS_GUE_HDR_LEN : 0);
	__u16 inner_len = p->l3len;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	void *ip;

	if (d->family != p->family)
		return XDP_DROP;
	if (cfg->tun_mtu && (__u32)inner_len + hdrs > cfg->tun_mtu) {
		struct iphdr *iph = data + (l2len & 0x1f);

		if ((void *)(iph + 1) > end)
			return XDP_DROP;
		/* IPv4 without DF may be fragmented by the path: send it on. */
		if (p->family == RVS_AF_INET6 || (iph->frag_off & bpf_htons(0x4000)))
			return icmp_too_big(ctx, p, cfg->tun_mtu - hdrs);
	}
	/* Keep the L2 header (with its VLAN tag) to write it in front again. */
	if (l2len == sizeof(struct ethhdr)) {
		if (data + sizeof(struct ethhdr) > end)
			return XDP_DROP;
		__builtin_memcpy(l2, data, sizeof(struct ethhdr));
	} else {
		if (data + 18 > end)
			return XDP_DROP;
		__builtin_memcpy(l2, data, 18);
	}
	if (bpf_xdp_adjust_head(ctx, -(int)hdrs))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (l2len == sizeof(struct ethhdr)) {
		if (data + sizeof(struct ethhdr) > end)
			return XDP_DROP;
		__builtin_memcpy(data, l2, sizeof(struct ethhdr));
		ip = data + sizeof(struct ethhdr);
	} else {
		if (data + 18 > end)
			return XDP_DROP;
		__builtin_memcpy(data, l2, 18);
		ip = data + 18;
	}
	if (p->family == RVS_AF_INET) {
		struct iphdr *oh = ip;
		struct iphdr *inner = ip + hdrs;
		struct iphdr h = {};

		if ((void *)(inner + 1) > end || (void *)(oh + 1) > end)
			return XDP_DROP;
		h.version = 4;
		h.ihl = 5;
		h.tos = inner->tos;
		h.tot_len = bpf_htons(inner_len + hdrs);
		h.frag_off = inner->frag_off & bpf_htons(0x4000); /* copy DF */
		h.ttl = RVS_TUN_TTL;
		h.protocol = udp ? IPPROTO_UDP : IPPROTO_IPIP;
		__builtin_memcpy(&h.saddr, cfg->tun_src4, 4);
		h.saddr = tun_source_word(h.saddr, cfg->tun_vary4 > 16 ? 16 : cfg->tun_vary4, p);
		__builtin_memcpy(&h.daddr, d->addr, 4);
		h.check = ip4_csum(&h);
		__builtin_memcpy(oh, &h, sizeof(h));
	} else {
		struct ipv6hdr *oh = ip;
		struct ipv6hdr *inner = ip + hdrs;

		if ((void *)(inner + 1) > end || (void *)(oh + 1) > end)
			return XDP_DROP;
		/* version 6 + traffic class + flow label of the inner header */
		__builtin_memcpy(oh, inner, 4);
		oh->payload_len = bpf_htons(inner_len + hdrs - sizeof(struct ipv6hdr));
		oh->nexthdr = udp ? IPPROTO_UDP : IPPROTO_IPV6;
		oh->hop_limit = RVS_TUN_TTL;
		__builtin_memcpy(&oh->saddr, cfg->tun_src6, 16);
		oh->saddr.in6_u.u6_addr32[3] =
			tun_source_word(oh->saddr.in6_u.u6_addr32[3], cfg->tun_vary6, p);
		__builtin_memcpy(&oh->daddr, d->addr, 16);
	}
	if (udp) {
		struct udphdr *uh = ip + outer_ip;
		__u8 *gue = (void *)(uh + 1);

		if ((void *)(gue + RVS_GUE_HDR_LEN) > end)
			return XDP_DROP;
		uh->source = flow_sport(p);
		uh->dest = d->gue_port;
		uh->len = bpf_htons(inner_len + sizeof(struct udphdr) + RVS_GUE_HDR_LEN);
		/* Zero checksum: allowed for IPv4, and for IPv6 tunnels by RFC 6935;
		 * rvs's own decapsulator accepts it. */
		uh->check = 0;
		gue[0] = 0; /* version 0, C = 0, no optional fields */
		gue[1] = p->family == RVS_AF_INET ? IPPROTO_IPIP : IPPROTO_IPV6;
		gue[2] = 0;
		gue[3] = 0;
	}
	return l2_out(ctx, d->mac, d->smac, d->ifindex);
}

#endif /* RVS_LIB_ENCAP_H */
