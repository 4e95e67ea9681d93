// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/icmp.h: ICMP errors about a flow: to its real server, rewritten
 * for NAT flows; those about FULLNAT flows are handed to xdp_fnat
 * (lib/fnat.h). */
#ifndef RVS_LIB_ICMP_H
#define RVS_LIB_ICMP_H

#include "lib/flow.h"
#include "lib/stats.h"
#include "lib/nat.h"
#include "lib/fnat.h"

/* ------------------------------------------------- ICMP errors of NAT flows */

/* Rewrite an ICMP error about a NAT flow as IPVS's ip_vs_nat_icmp does, and
 * fix every checksum incrementally:
 *  - to_rs (an error from the client side about a reply VIP -> client):
 *    outer destination and quoted source become the real server's address,
 *    the quoted source port its port;
 *  - !to_rs (an error from the real server's side about a packet client ->
 *    real server): outer source and quoted destination become the VIP, the
 *    quoted destination port the VIP's port.
 * The quoted packet's IPv4 header checksum and its TCP/UDP checksum (when
 * the quote reaches it; a zero IPv4 UDP checksum stays zero) follow, then
 * the ICMP checksum (ICMPv6: with the outer address in its pseudo-header). */
static __noinline int icmp_nat_rewrite(struct xdp_md *ctx, const struct pkt *p, int to_rs,
					    const __u32 *naddr, __be16 nport)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3off & 0xff, l4 = p->l4off & 0x1ff, il3 = (l4 + 8) & 0x3ff, il4;
	__u32 acc_in = 0;   /* quoted addresses: pseudo-header of the quoted L4 */
	__u32 acc_port = 0; /* the quoted port */
	__u32 acc_icmp = 0; /* every word changed inside the ICMP message */
	__u16 *icheck, *ports;
	__u8 *icmp = data + l4;
	int i;

	if ((void *)(icmp + 8) > end)
		return -1;
	if (p->family == RVS_AF_INET) {
		struct iphdr *ip = data + l3;
		struct iphdr *iip = data + il3;
		__u32 *oa, *ia, old;
		__u16 oldc;

		if ((void *)(ip + 1) > end || (void *)(iip + 1) > end)
			return -1;
		oa = to_rs ? &ip->daddr : &ip->saddr;
		ip->check = csum_apply(ip->check, csum_acc32(0, *oa, naddr[0]));
		*oa = naddr[0];
		ia = to_rs ? &iip->saddr : &iip->daddr;
		old = *ia;
		acc_in = csum_acc32(0, old, naddr[0]);
		*ia = naddr[0];
		oldc = iip->check;
		iip->check = csum_apply(oldc, acc_in);
		acc_icmp = acc_in + (__u16)~oldc + iip->check;
		il4 = (il3 + (iip->ihl & 0xf) * 4) & 0x3ff;
	} else {
		struct ipv6hdr *ip6 = data + l3;
		struct ipv6hdr *iip = data + il3;
		__u32 *oa, *ia;

		if ((void *)(ip6 + 1) > end || (void *)(iip + 1) > end)
			return -1;
		oa = to_rs ? (__u32 *)&ip6->daddr : (__u32 *)&ip6->saddr;
		ia = to_rs ? (__u32 *)&iip->saddr : (__u32 *)&iip->daddr;
#pragma unroll
		for (i = 0; i < 4; i++) {
			/* The outer address is in ICMPv6's pseudo-header. */
			acc_icmp = csum_acc32(acc_icmp, oa[i], naddr[i]);
			oa[i] = naddr[i];
			acc_in = csum_acc32(acc_in, ia[i], naddr[i]);
			ia[i] = naddr[i];
		}
		acc_icmp += acc_in;
		il4 = (il3 + sizeof(struct ipv6hdr)) & 0x3ff;
	}
	ports = data + il4;
	if ((void *)(ports + 2) > end)
		return -1;
	{
		__u16 *pp = to_rs ? &ports[0] : &ports[1];

		acc_port = csum_acc16(0, *pp, nport);
		*pp = nport;
	}
	acc_icmp = quoted_l4_fix(p, data + il4, end, acc_in, acc_port, acc_icmp);
	icheck = (__u16 *)(icmp + 2);
	*icheck = csum_apply(*icheck, acc_icmp);
	return 0;
}

/* ip_vs_in_icmp for NAT: an error from the client's side about a reply of
 * flow `f` goes to the flow's real server, rewritten to what it sent. */
static __always_inline int icmp_nat_in(struct xdp_md *ctx, const struct pkt *p,
				       const struct rvs_flow *f, const struct rvs_dest *d)
{
	__be16 rport = d->port ? d->port : p->dport;

	if (d->family != p->family)
		return XDP_DROP;
	if (icmp_nat_rewrite(ctx, p, 1, (const __u32 *)d->addr, rport))
		return XDP_PASS;
	count(&svc_stats, f->svc, p->l3len, 0, 0);
	count(&dest_stats, f->dest, p->l3len, 0, 0);
	/* Routed like the flow's packets (the FIB source is the client's). */
	return fib_out(ctx, p, (const __u32 *)d->addr, p->saddr);
}

/* ip_vs_out_icmp: an error from the real servers' side about a packet the
 * director sent to a real server (client -> real server) goes to the
 * client, from the VIP, quoting what the client sent. */
static __always_inline int icmp_nat_out(struct xdp_md *ctx, const struct pkt *p,
					const struct rvs_config *cfg)
{
	struct rvs_nat *n;
	__u32 vaddr[4];

	/* The quote describes (real server, client) as a reply would. */
	n = nat_rev_lookup(p, cfg);
	if (!n)
		return XDP_PASS;
	__builtin_memcpy(vaddr, n->vaddr, 16);
	count(&svc_stats, n->svc, p->l3len, 1, 0);
	count(&dest_stats, n->dest, p->l3len, 1, 0);
	if (dec_ttl(ctx, p))
		return XDP_PASS;
	if (icmp_nat_rewrite(ctx, p, 0, vaddr, n->vport))
		return XDP_PASS;
	return fib_out(ctx, p, p->daddr, vaddr);
}

/* ----------------------------------------------------------- ICMP errors */

/* An ICMP error about a known DR/TUN flow goes to that flow's real server,
 * unchanged (TUN: encapsulated); about a NAT flow it is rewritten to match
 * the flow and goes where the flow goes (icmp_nat_in / icmp_nat_out);
 * about a FULLNAT flow (a reply VIP -> client, or a packet laddr -> RS
 * quoted by an error to a local address) xdp_fnat translates it
 * (lib/fnat.h); anything else is the kernel's. */
static __always_inline int icmp_error(struct xdp_md *ctx, const struct pkt *p,
				      const struct rvs_config *cfg)
{
	struct rvs_dest *d;
	struct rvs_flow *f;
	__u32 didx;

	f = flow_lookup(p->family, p->saddr, p->daddr, p->sport, p->dport, p->proto);
	if (!f && p->proto == IPPROTO_TCP)
		f = embryo_lookup(p);
	if (!f) {
		/* Not a NAT flow's: quoting laddr:lport -> RS:rport, maybe
		 * (xdp_fnat looks in fnat_rev). */
		if ((cfg->flags & RVS_CFG_F_FNAT) && !nat_rev_lookup(p, cfg))
			return fnat_enter(ctx, RVS_FNAT_ICMP_OUT, 0, 0);
		return icmp_nat_out(ctx, p, cfg);
	}
	didx = f->dest;
	d = bpf_map_lookup_elem(&dests, &didx);
	if (!d || (d->flags & RVS_DEST_F_UNAVAILABLE))
		return XDP_PASS;
	if (d->method == RVS_FWD_NAT)
		return icmp_nat_in(ctx, p, f, d);
	if (d->method == RVS_FWD_FNAT)
		return fnat_enter(ctx, RVS_FNAT_ICMP_IN, didx, f->svc);
	count(&svc_stats, f->svc, p->l3len, 0, 0);
	count(&dest_stats, didx, p->l3len, 0, 0);
	return forward(ctx, p, d, cfg);
}

#endif /* RVS_LIB_ICMP_H */
