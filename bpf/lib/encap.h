// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/encap.h: TUN forwarding (IPIP, GUE, GRE, Geneve), the tunnel
 * checksums, and the ICMP "too big" answer for packets that do not fit the
 * tunnel. */
#ifndef RVS_LIB_ENCAP_H
#define RVS_LIB_ENCAP_H

#include "lib/parse.h"
#include "lib/hash.h"
#include "lib/csum.h"
#include "lib/l2.h"
#include "lib/map.h"

#ifndef IPPROTO_GRE
#define IPPROTO_GRE 47
#endif

/* Per-CPU room the tunnel checksum copies the packet into, one chunk at a
 * time (bpf_csum_diff reads at most 512 bytes, and only from memory whose
 * size the verifier knows). */
struct csum_scratch {
	__u8 b[RVS_CSUM_CHUNK];
};

RVS_MAP(tun_csum_tmp, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct csum_scratch);

/* The one's complement sum (32-bit partial, words as they lie in memory)
 * of `len` bytes of the packet from offset `off`; -1 when the packet is
 * longer than RVS_CSUM_CHUNKS chunks or a helper fails. A global function:
 * the verifier checks its loop once, not once per path of the caller. */
__noinline __s64 tun_pkt_sum(struct xdp_md *ctx, __u32 off, __u32 len)
{
	/* pos and end rather than off, done and len: one value fewer live
	 * across the helper calls, so one stack slot fewer (6.1's verifier
	 * counts this frame in xdp_lb's 512-byte stack limit). */
	__u32 zero = 0, pos = off, end, i;
	__s64 s = 0;
	__u8 *buf = bpf_map_lookup_elem(&tun_csum_tmp, &zero);

	if (!buf || len > RVS_CSUM_CHUNK * RVS_CSUM_CHUNKS)
		return -1;
	end = off + len;
	for (i = 0; i < RVS_CSUM_CHUNKS; i++) {
		__u32 n, n4;

		if (pos >= end)
			break;
		n = end - pos;
		if (n > RVS_CSUM_CHUNK)
			n = RVS_CSUM_CHUNK;
		if (n == 0)
			break;
		/* 1..RVS_CSUM_CHUNK as the verifier sees it: clang proves n
		 * non-zero and drops the test above, and a 6.1 verifier
		 * refuses a load_bytes size whose minimum is 0. */
		n--;
		barrier_var(n);
		n = (n & (RVS_CSUM_CHUNK - 1)) + 1;
		/* The word the last byte falls in is zero past that byte (an
		 * odd tail sums as if padded with zeros, RFC 1071). */
		*(__u32 *)(buf + ((n - 1) & (RVS_CSUM_CHUNK - 4))) = 0;
		if (bpf_xdp_load_bytes(ctx, pos, buf, n))
			return -1;
		n4 = (n + 3) & ~3u;
		if (n4 > RVS_CSUM_CHUNK)
			n4 = RVS_CSUM_CHUNK;
		s = bpf_csum_diff(0, 0, (__be32 *)buf, n4, (__u32)s);
		if (s < 0)
			return -1;
		pos += n;
	}
	return s;
}

/* Fold a sum of 16-bit words to the 16-bit one's complement checksum. */
static __always_inline __u16 csum_fold64(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

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

/* Bytes the tunnel `method` (RVS_FWD_TUN_*) puts between the outer IP
 * header and the inner packet. */
static __always_inline __u32 tun_extra(__u8 method, __u32 csum)
{
	switch (method) {
	case RVS_FWD_TUN_GUE:
		return sizeof(struct udphdr) + RVS_GUE_HDR_LEN;
	case RVS_FWD_TUN_GRE:
		return RVS_GRE_HDR_LEN + (csum ? RVS_GRE_CSUM_LEN : 0);
	case RVS_FWD_TUN_GENEVE:
		return sizeof(struct udphdr) + RVS_GENEVE_HDR_LEN;
	default:
		return 0;
	}
}

/* Encapsulate in the tunnel `method` (d->method, a constant at each call
 * site so the verifier sees one tunnel per copy: IPIP, GUE, GRE or Geneve) in
 * the family of the packet (IPv4 in IPv4, IPv6 in IPv6), then send to the
 * real server / next hop. With RVS_DEST_F_TUN_CSUM the UDP tunnels carry
 * the outer UDP checksum and GRE its checksum (C bit); without it the UDP
 * checksum is zero (allowed for IPv4, and for IPv6 tunnels by RFC 6935) and
 * GRE has no checksum field, as kernel IPVS sends with --tun-nocsum. */
static __always_inline int encap(struct xdp_md *ctx, const struct pkt *p,
				 const struct rvs_dest *d, const struct rvs_config *cfg,
				 const __u8 method)
{
	__u8 l2[18];
	__u32 l2len = p->l3off;
	__u32 csum = d->flags & RVS_DEST_F_TUN_CSUM;
	__u32 outer_ip = p->family == RVS_AF_INET ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	__u32 extra = tun_extra(method, csum);
	__u32 hdrs = outer_ip + extra;
	__u16 inner_len = p->l3len;
	__be16 ethertype = p->family == RVS_AF_INET ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	__u8 oproto;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	void *ip;

	if (d->family != p->family)
		return XDP_DROP;
	switch (method) {
	case RVS_FWD_TUN_GUE:
	case RVS_FWD_TUN_GENEVE:
		oproto = IPPROTO_UDP;
		break;
	case RVS_FWD_TUN_GRE:
		oproto = IPPROTO_GRE;
		break;
	default:
		oproto = p->family == RVS_AF_INET ? IPPROTO_IPIP : IPPROTO_IPV6;
		break;
	}
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
		h.protocol = oproto;
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
		oh->nexthdr = oproto;
		oh->hop_limit = RVS_TUN_TTL;
		__builtin_memcpy(&oh->saddr, cfg->tun_src6, 16);
		oh->saddr.in6_u.u6_addr32[3] =
			tun_source_word(oh->saddr.in6_u.u6_addr32[3], cfg->tun_vary6, p);
		__builtin_memcpy(&oh->daddr, d->addr, 16);
	}
	if (method == RVS_FWD_TUN_GRE) {
		__u8 *gre = ip + outer_ip;
		__s64 s;

		if ((void *)(gre + RVS_GRE_HDR_LEN + RVS_GRE_CSUM_LEN) > end)
			return XDP_DROP;
		/* RFC 2784: C bit, reserved0 and version 0; the protocol is the
		 * inner packet's ethertype. */
		gre[0] = csum ? 0x80 : 0;
		gre[1] = 0;
		*(__be16 *)(gre + 2) = ethertype;
		if (csum) {
			/* Checksum over the GRE header and the payload, the
			 * field itself (and reserved1) zero while summing. */
			*(__u32 *)(gre + 4) = 0;
			s = tun_pkt_sum(ctx, (__u32)(gre - (__u8 *)data), inner_len + extra);
			/* (Reading the packet leaves packet pointers valid.) */
			if (s < 0)
				return XDP_DROP;
			*(__u16 *)(gre + 4) = csum_fold64((__u64)s);
		}
	} else if (method == RVS_FWD_TUN_GUE || method == RVS_FWD_TUN_GENEVE) {
		struct udphdr *uh = ip + outer_ip;
		__u8 *t = (void *)(uh + 1);
		__u16 ulen = inner_len + extra;
		__u64 ps = 0;
		__s64 s;
		int i;

		if ((void *)(t + RVS_GENEVE_HDR_LEN) > end)
			return XDP_DROP;
		uh->source = flow_sport(p);
		uh->len = bpf_htons(ulen);
		uh->check = 0;
		if (method == RVS_FWD_TUN_GUE) {
			uh->dest = d->gue_port;
			t[0] = 0; /* version 0, C = 0, no optional fields */
			t[1] = p->family == RVS_AF_INET ? IPPROTO_IPIP : IPPROTO_IPV6;
			t[2] = 0;
			t[3] = 0;
		} else {
			/* RFC 8926: version 0, no options, O = C = 0; the
			 * protocol is the inner ethertype (IP without an inner
			 * Ethernet header); VNI 0. */
			uh->dest = bpf_htons(RVS_GENEVE_PORT);
			*(__u32 *)t = 0;
			*(__be16 *)(t + 2) = ethertype;
			*(__u32 *)(t + 4) = 0;
		}
		if (csum) {
			/* Pseudo-header: outer addresses, protocol, UDP length. */
			if (p->family == RVS_AF_INET) {
				struct iphdr *oh = ip;

				if ((void *)(oh + 1) > end)
					return XDP_DROP;
				ps += (oh->saddr & 0xffff) + (oh->saddr >> 16) +
				      (oh->daddr & 0xffff) + (oh->daddr >> 16);
			} else {
				struct ipv6hdr *oh = ip;

				if ((void *)(oh + 1) > end)
					return XDP_DROP;
#pragma unroll
				for (i = 0; i < 4; i++) {
					__u32 a = oh->saddr.in6_u.u6_addr32[i];
					__u32 b = oh->daddr.in6_u.u6_addr32[i];

					ps += (a & 0xffff) + (a >> 16) + (b & 0xffff) + (b >> 16);
				}
			}
			ps += bpf_htons(IPPROTO_UDP) + bpf_htons(ulen);
			s = tun_pkt_sum(ctx, (__u32)((__u8 *)uh - (__u8 *)data), ulen);
			if (s < 0)
				return XDP_DROP;
			uh->check = csum_fold64(ps + (__u64)s);
			if (uh->check == 0)
				uh->check = 0xffff; /* 0 means "no checksum" */
		}
	}
	return l2_out(ctx, d->mac, d->smac, d->ifindex);
}

/* TUN forwarding, one global function for every call site: the verifier
 * checks the four tunnels (times family, VLAN tag and checksum) once, not
 * once per path of the caller. The pointers are the caller's packet
 * summary (stack) and map values. */
__noinline int tun_encap(struct xdp_md *ctx, const struct pkt *p, const struct rvs_dest *d,
			 const struct rvs_config *cfg)
{
	if (!ctx || !p || !d || !cfg)
		return XDP_DROP;
	switch (d->method) {
	case RVS_FWD_TUN_IPIP:
		return encap(ctx, p, d, cfg, RVS_FWD_TUN_IPIP);
	case RVS_FWD_TUN_GUE:
		return encap(ctx, p, d, cfg, RVS_FWD_TUN_GUE);
	case RVS_FWD_TUN_GRE:
		return encap(ctx, p, d, cfg, RVS_FWD_TUN_GRE);
	case RVS_FWD_TUN_GENEVE:
		return encap(ctx, p, d, cfg, RVS_FWD_TUN_GENEVE);
	default:
		return XDP_DROP;
	}
}

#endif /* RVS_LIB_ENCAP_H */
