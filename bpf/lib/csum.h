// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/csum.h: incremental checksum updates and the NAT address/port rewrite. */
#ifndef RVS_LIB_CSUM_H
#define RVS_LIB_CSUM_H

#include "lib/parse.h"

/* ------------------------------------------------------------ checksums */

/* RFC 1624 incremental update: accumulate ~old + new over 16-bit words as
 * they lie in memory (the one's complement sum does not care about order). */
static __always_inline __u32 csum_acc32(__u32 acc, __u32 old, __u32 new)
{
	acc += (~old & 0xffff) + (~old >> 16);
	acc += (new & 0xffff) + (new >> 16);
	return acc;
}

static __always_inline __u32 csum_acc16(__u32 acc, __u16 old, __u16 new)
{
	return acc + (__u16)~old + new;
}

static __always_inline __u16 csum_apply(__u16 check, __u32 acc)
{
	__u32 s = (__u16)~check;

	s += acc;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Full checksum of a 20-byte IPv4 header (check field zero). */
static __always_inline __u16 ip4_csum(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 s = 0;
	int i;

#pragma unroll
	for (i = 0; i < 10; i++)
		s += w[i];
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Fix the L4 checksum of the packet an ICMP error quotes (its L4 header
 * at `l4`) for the quoted addresses' change `acc_in` and ports' change
 * `acc_port`. Returns `acc_icmp` (the words changed that the ICMP checksum
 * covers) with both changes added: the ports' and the checksum's. A
 * checksum the quote cuts off, or an IPv4 UDP checksum 0, is left as it is. */
static __always_inline __u32 quoted_l4_fix(const struct pkt *p, void *l4, void *end, __u32 acc_in,
					   __u32 acc_port, __u32 acc_icmp)
{
	__u16 *l4check = NULL;

	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) <= end)
			l4check = &th->check;
	} else {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) <= end && (uh->check || p->family == RVS_AF_INET6))
			l4check = &uh->check;
	}
	acc_icmp += acc_port;
	if (l4check) {
		__u16 oldc = *l4check, newc = csum_apply(oldc, acc_in + acc_port);

		if (newc == 0 && p->proto == IPPROTO_UDP)
			newc = 0xffff;
		acc_icmp += (__u16)~oldc + newc;
		*l4check = newc;
	}
	return acc_icmp;
}

/* Rewrite one address (4 or 16 bytes at `a`) and the port `port` of the
 * packet, fixing the IPv4 header checksum and the L4 checksum. */
static __always_inline int rewrite_addr_port(struct xdp_md *ctx, const struct pkt *p, int dst,
					     const __u32 *naddr, __be16 nport)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3off & 0xff, l4 = p->l4off & 0x1ff;
	__u32 acc = 0; /* pseudo-header + port change for L4 */
	__u16 *check;
	__be16 *portp;

	if (p->family == RVS_AF_INET) {
		struct iphdr *ip = data + l3;
		__u32 *a;

		if ((void *)(ip + 1) > end)
			return -1;
		a = dst ? &ip->daddr : &ip->saddr;
		acc = csum_acc32(acc, *a, naddr[0]);
		ip->check = csum_apply(ip->check, acc);
		*a = naddr[0];
	} else {
		struct ipv6hdr *ip6 = data + l3;
		__u32 *a;
		int i;

		if ((void *)(ip6 + 1) > end)
			return -1;
		a = dst ? (__u32 *)&ip6->daddr : (__u32 *)&ip6->saddr;
#pragma unroll
		for (i = 0; i < 4; i++) {
			acc = csum_acc32(acc, a[i], naddr[i]);
			a[i] = naddr[i];
		}
	}
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = data + l4;

		if ((void *)(th + 1) > end)
			return -1;
		check = &th->check;
		portp = dst ? &th->dest : &th->source;
		acc = csum_acc16(acc, *portp, nport);
		*check = csum_apply(*check, acc);
		*portp = nport;
	} else {
		struct udphdr *uh = data + l4;

		if ((void *)(uh + 1) > end)
			return -1;
		portp = dst ? &uh->dest : &uh->source;
		acc = csum_acc16(acc, *portp, nport);
		/* IPv4 UDP without checksum stays without one. */
		if (uh->check || p->family == RVS_AF_INET6) {
			uh->check = csum_apply(uh->check, acc);
			if (uh->check == 0)
				uh->check = 0xffff;
		}
		*portp = nport;
	}
	return 0;
}

#endif /* RVS_LIB_CSUM_H */
