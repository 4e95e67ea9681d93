// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/nat.h: the NAT reply path (real server -> client, rewritten back to
 * the VIP), and the reply entry a new NAT flow makes for it (nat_rev_add). */
#ifndef RVS_LIB_NAT_H
#define RVS_LIB_NAT_H

#include "lib/maps.h"
#include "lib/stats.h"
#include "lib/tcp_state.h"
#include "lib/forward.h"

/* ------------------------------------------------------- NAT reply path */

/* The NAT flow that `p`'s (source, destination) is the (real server,
 * client) of, from nat_rev; NULL when NAT is off or there is none. A reply
 * (nat_reply) passes its own header fields, an ICMP error (icmp_nat_out)
 * those of the packet it quotes. */
static __always_inline struct rvs_nat *nat_rev_lookup(const struct pkt *p,
						      const struct rvs_config *cfg)
{
	struct rvs_nat_key nk = {};

	if (!(cfg->flags & RVS_CFG_F_NAT))
		return NULL;
	__builtin_memcpy(nk.raddr, p->saddr, 16);
	__builtin_memcpy(nk.caddr, p->daddr, 16);
	nk.rport = p->sport;
	nk.cport = p->dport;
	nk.proto = p->proto;
	nk.family = p->family;
	return bpf_map_lookup_elem(&nat_rev, &nk);
}

static __always_inline int nat_reply(struct xdp_md *ctx, const struct pkt *p,
				     const struct rvs_config *cfg)
{
	struct rvs_nat *n;

	n = nat_rev_lookup(p, cfg);
	if (!n)
		return XDP_PASS;

	reply_flow(p, p->daddr, (const __u32 *)n->vaddr, p->dport, n->vport);
	count(&svc_stats, n->svc, p->l3len, 1, 0);
	count(&dest_stats, n->dest, p->l3len, 1, 0);
	if (dec_ttl(ctx, p))
		return XDP_PASS; /* the kernel sends time exceeded */
	{
		__u32 vaddr[4];

		__builtin_memcpy(vaddr, n->vaddr, 16);
		if (rewrite_addr_port(ctx, p, 0, vaddr, n->vport))
			return XDP_DROP;
		return fib_out(ctx, p, p->daddr, vaddr);
	}
}

/* ------------------------------------------------ NAT reply entries */

/* The reply entry of a new NAT flow (nat_rev: real server and client ->
 * VIP), so that the reply path rewrites its source back. */
static __always_inline void nat_rev_add(const struct pkt *p, const struct rvs_dest *d,
					__u32 svc_idx, __u32 dest_idx)
{
	struct rvs_nat_key nk = {};
	struct rvs_nat nv = {};

	__builtin_memcpy(nk.raddr, d->addr, 16);
	__builtin_memcpy(nk.caddr, p->saddr, 16);
	nk.rport = d->port ? d->port : p->dport;
	nk.cport = p->sport;
	nk.proto = p->proto;
	nk.family = p->family;
	__builtin_memcpy(nv.vaddr, p->daddr, 16);
	nv.vport = p->dport;
	nv.svc = svc_idx;
	nv.dest = dest_idx;
	bpf_map_update_elem(&nat_rev, &nk, &nv, BPF_ANY);
}

#endif /* RVS_LIB_NAT_H */
