// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/forward.h: forwarding by the real server's method (DR, TUN, DSR by
 * IP option, NAT), FIB routing and TTL decrement. */
#ifndef RVS_LIB_FORWARD_H
#define RVS_LIB_FORWARD_H

#include "lib/parse.h"
#include "lib/csum.h"
#include "lib/l2.h"
#include "lib/encap.h"
#include "lib/maps.h"
#include "lib/dsr_opt.h"

#ifndef E2BIG
#define E2BIG 7
#endif

/* Tell the control plane that the next hop the FIB chose (fib->ipv4_dst /
 * ipv6_dst, the gateway or the destination itself, on fib->ifindex) has no
 * neighbour entry: nh_missing, once per next hop until it is drained. */
static __always_inline void want_neigh(const struct bpf_fib_lookup *fib)
{
	struct rvs_nh_key k = {};
	__u32 ifindex = fib->ifindex;
	__u32 zero = 0;
	__u64 *full;

	k.family = fib->family;
	if (fib->family == RVS_AF_INET)
		__builtin_memcpy(k.addr, &fib->ipv4_dst, 4);
	else
		__builtin_memcpy(k.addr, fib->ipv6_dst, 16);
	if (bpf_map_lookup_elem(&nh_missing, &k))
		return;
	if (bpf_map_update_elem(&nh_missing, &k, &ifindex, BPF_NOEXIST) != -E2BIG)
		return;
	full = bpf_map_lookup_elem(&nh_missing_full, &zero);
	if (full)
		*full += 1;
}

/* Route a NAT-rewritten packet with the kernel's FIB. When the neighbour is
 * not resolved yet the next hop is reported (want_neigh) and the packet
 * passed to the kernel: it forwards it and resolves the neighbour itself,
 * except for a reply whose source is a local address (the VIP on a director
 * that just took over) without accept_local, which it drops as a martian;
 * then the control plane's resolution is what lets the next one through
 * (there is no MAC to redirect to, and XDP cannot hold a packet). */
static __always_inline int fib_out(struct xdp_md *ctx, const struct pkt *p, const __u32 *dst,
				   const __u32 *src)
{
	struct bpf_fib_lookup fib = {};
	int rc;

	fib.ifindex = ctx->ingress_ifindex;
	fib.l4_protocol = p->proto;
	fib.tot_len = p->l3len;
	if (p->family == RVS_AF_INET) {
		fib.family = RVS_AF_INET;
		fib.ipv4_src = src[0];
		fib.ipv4_dst = dst[0];
	} else {
		fib.family = RVS_AF_INET6;
		__builtin_memcpy(fib.ipv6_src, src, 16);
		__builtin_memcpy(fib.ipv6_dst, dst, 16);
	}
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		want_neigh(&fib);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	return l2_out(ctx, fib.dmac, fib.smac, fib.ifindex);
}

/* Decrement the TTL / hop limit of a routed reply; 0 = it may go on. */
static __always_inline int dec_ttl(struct xdp_md *ctx, const struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3off & 0xff;

	if (p->family == RVS_AF_INET) {
		struct iphdr *ip = data + l3;
		__u16 old, new;

		if ((void *)(ip + 1) > end || ip->ttl <= 1)
			return -1;
		old = *(__u16 *)&ip->ttl;
		ip->ttl--;
		new = *(__u16 *)&ip->ttl;
		ip->check = csum_apply(ip->check, csum_acc16(0, old, new));
	} else {
		struct ipv6hdr *ip6 = data + l3;

		if ((void *)(ip6 + 1) > end || ip6->hop_limit <= 1)
			return -1;
		ip6->hop_limit--;
	}
	return 0;
}

static __always_inline int forward(struct xdp_md *ctx, const struct pkt *p,
				   const struct rvs_dest *d, const struct rvs_config *cfg)
{
	__be16 nport;

	switch (d->method) {
	case RVS_FWD_DR:
		return l2_out(ctx, d->mac, d->smac, d->ifindex);
	case RVS_FWD_TUN_IPIP:
	case RVS_FWD_TUN_GUE:
	case RVS_FWD_TUN_GRE:
	case RVS_FWD_TUN_GENEVE:
		/* What the kernel's ip_rcv drops before IPVS sees it: a total
		 * length shorter than the IP header or longer than the frame
		 * (the outer lengths and the tunnel checksum come from it). */
		if (p->l3len < (p->family == RVS_AF_INET ? 20 : 40) ||
		    (__u32)p->l3len + p->l3off > (__u32)(ctx->data_end - ctx->data))
			return XDP_DROP;
		return tun_encap(ctx, p, d, cfg);
	case RVS_FWD_TUN_OPT:
		/* Errors about the flow: the kernel's (lib/dsr_opt.h). */
		if (p->icmp)
			return XDP_PASS;
		return dsr_opt_enter(ctx, d);
	case RVS_FWD_NAT:
		if (d->family != p->family)
			return XDP_DROP;
		nport = d->port ? d->port : p->dport;
		if (rewrite_addr_port(ctx, p, 1, (const __u32 *)d->addr, nport))
			return XDP_DROP;
		/* The next hop the control plane resolved for this real server
		 * (IPVS caches its route per real server too), when it is on the
		 * link the packet came in on (same MTU); else the kernel's FIB. */
		if ((d->flags & RVS_DEST_F_NEXTHOP) && d->ifindex == ctx->ingress_ifindex)
			return l2_out(ctx, d->mac, d->smac, d->ifindex);
		return fib_out(ctx, p, (const __u32 *)d->addr, p->saddr);
	default:
		return XDP_DROP;
	}
}

#endif /* RVS_LIB_FORWARD_H */
