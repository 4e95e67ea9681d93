// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/dsr_opt.h: the director's side of DSR with the service address in an
 * IP option (RVS_FWD_TUN_OPT, `--tun-type opt`; Kubernetes' NodePort DSR).
 *
 * A client's packet to the service (VIP:vport, on a NodePort the node's own
 * address) is rewritten to the real server (a pod: address:port) like NAT,
 * and the service's address and port are put in an option right after the
 * fixed IP header: an IPv4 option (8 bytes, struct dsr_opt4) or an IPv6
 * Destination Options header (24 bytes, struct dsr_opt6). The packet then
 * goes to the next hop toward the real server (the dest's mac/ifindex, the
 * same next-hop resolution as a tunnel's outer destination). The real
 * server's node (bpf/dsr_rs.c, `rvsd realserver --mode dsr-opt`) records the
 * flow's service from the option, removes the option, and rewrites the
 * replies' source back to the service: they go straight to the client and
 * never come back through this director. The client address is kept, so the
 * server sees it.
 *
 * MTU: the packet grows by 8 (IPv4) or 24 (IPv6) bytes. One that would no
 * longer fit in the tunnel MTU (rvs_config.tun_mtu, the interface's MTU by
 * default) is answered with ICMP "fragmentation needed" / "packet too big"
 * carrying the MTU minus the option (IPv4 without DF is sent on, as the
 * tunnels do), the way Cilium answers for its DSR option; the client's TCP
 * then lowers its segment size. The real server's node also lowers the MSS
 * of its SYN-ACKs by the option's length (bpf/dsr_rs.c), so a TCP client
 * normally never sends a segment too big for the option.
 *
 * The rewrite runs in a program of its own, xdp_dsr_opt, which forward()
 * tail-calls (dsr_opt_enter) with the real server in dsr_tmp: the
 * director's main program has no stack or verifier budget left for it. A
 * failed tail call (dsr_prog empty) drops the packet.
 *
 * Not carried (dropped): IPv4 packets that already have options (the option
 * must sit right after a 20-byte header for the real server to find it).
 * ICMP errors about a flow are left to the kernel (XDP_PASS): the quoted
 * packet is the real server's reply from the service address, which this
 * director never rewrote. */
#ifndef RVS_LIB_DSR_OPT_H
#define RVS_LIB_DSR_OPT_H

#include "lib/parse.h"
#include "lib/csum.h"
#include "lib/l2.h"
#include "lib/encap.h"
#include "lib/maps.h"

/* Checksum of an IPv4 header with the 8-byte option (28 bytes, the check
 * field zero). */
static __always_inline __u16 dsr_ip4_csum28(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 s = 0;
	int i;

#pragma unroll
	for (i = 0; i < 14; i++)
		s += w[i];
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Grow the packet by `grow` bytes between the fixed IP header (`iplen`
 * bytes) and what follows: the L2 header and the IP header move `grow`
 * bytes toward the head. Returns the new IP header, NULL on failure (the
 * packet is then unusable: drop it). */
#define DSR_MAKE_ROOM(ctx, l2len, iplen, grow, out)                                 \
	do {                                                                       \
		__u8 buf_[18 + (iplen)];                                           \
		void *d_ = (void *)(long)(ctx)->data;                              \
		void *e_ = (void *)(long)(ctx)->data_end;                          \
		(out) = NULL;                                                      \
		if ((l2len) == 14) {                                               \
			if (d_ + 14 + (iplen) > e_)                                \
				break;                                             \
			__builtin_memcpy(buf_, d_, 14 + (iplen));                  \
		} else {                                                           \
			if (d_ + 18 + (iplen) > e_)                                \
				break;                                             \
			__builtin_memcpy(buf_, d_, 18 + (iplen));                  \
		}                                                                  \
		if (bpf_xdp_adjust_head((ctx), -(int)(grow)))                      \
			break;                                                     \
		d_ = (void *)(long)(ctx)->data;                                    \
		e_ = (void *)(long)(ctx)->data_end;                                \
		if ((l2len) == 14) {                                               \
			if (d_ + 14 + (iplen) + (grow) > e_)                       \
				break;                                             \
			__builtin_memcpy(d_, buf_, 14 + (iplen));                  \
			(out) = d_ + 14;                                           \
		} else {                                                           \
			if (d_ + 18 + (iplen) + (grow) > e_)                       \
				break;                                             \
			__builtin_memcpy(d_, buf_, 18 + (iplen));                  \
			(out) = d_ + 18;                                           \
		}                                                                  \
	} while (0)

/* Put the service `addr`:`port` in an IPv4 option after the 20-byte header
 * of the packet whose IP header is at `l2len`. 0 on success. */
static __always_inline int dsr_opt_insert4(struct xdp_md *ctx, __u32 l2len, __be32 addr,
					   __be16 port)
{
	struct iphdr *ip;
	struct dsr_opt4 *o;

	DSR_MAKE_ROOM(ctx, l2len, sizeof(struct iphdr), RVS_DSR_OPT4_LEN, ip);
	if (!ip)
		return -1;
	o = (void *)(ip + 1);
	o->type = RVS_DSR_OPT4_TYPE;
	o->len = RVS_DSR_OPT4_LEN;
	o->port = port;
	o->addr = addr;
	ip->ihl = (sizeof(struct iphdr) + RVS_DSR_OPT4_LEN) / 4;
	ip->tot_len = bpf_htons(bpf_ntohs(ip->tot_len) + RVS_DSR_OPT4_LEN);
	ip->check = 0;
	ip->check = dsr_ip4_csum28(ip);
	return 0;
}

/* Put the service `addr`:`port` in a Destination Options header after the
 * IPv6 header at `l2len`. 0 on success. The upper-layer checksum needs no
 * change: its pseudo-header holds the upper-layer length and protocol,
 * not the payload length and the first next header. */
static __always_inline int dsr_opt_insert6(struct xdp_md *ctx, __u32 l2len, const __u32 *addr,
					   __be16 port)
{
	struct ipv6hdr *ip6;
	struct dsr_opt6 *o;

	DSR_MAKE_ROOM(ctx, l2len, sizeof(struct ipv6hdr), RVS_DSR_OPT6_LEN, ip6);
	if (!ip6)
		return -1;
	o = (void *)(ip6 + 1);
	o->nexthdr = ip6->nexthdr;
	o->hdrlen = RVS_DSR_OPT6_LEN / 8 - 1;
	o->type = RVS_DSR_OPT6_TYPE;
	o->len = RVS_DSR_OPT6_OPTLEN;
	__builtin_memcpy(o->addr, addr, 16);
	o->port = port;
	o->pad[0] = 0;
	o->pad[1] = 0;
	ip6->nexthdr = IPPROTO_DSTOPTS;
	ip6->payload_len = bpf_htons(bpf_ntohs(ip6->payload_len) + RVS_DSR_OPT6_LEN);
	return 0;
}

/* Forward by RVS_FWD_TUN_OPT (in xdp_dsr_opt): destination -> the real server, the service
 * in the option, out to the next hop toward the real server. */
static __always_inline int dsr_opt_out(struct xdp_md *ctx, const struct pkt *p,
				       const struct rvs_dest *d, const struct rvs_config *cfg)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	/* Read apart (volatile) so that clang does not carry what the checks
	 * below prove about it into rewrite_addr_port's own read, whose mask
	 * the verifier needs. */
	__u32 l2len = *(volatile const __u16 *)&p->l3off, grow;
	__u32 svc[4];
	__be16 sport = p->dport, nport = d->port ? d->port : p->dport;
	int v4 = p->family == RVS_AF_INET;

	if (p->icmp)
		return XDP_PASS;
	if (d->family != p->family || (l2len != 14 && l2len != 18))
		return XDP_DROP;
	/* 14 or 18, but clang folds the two tests into a bit test and a
	 * select of data + 14 / data + 18 into data + l2len, from which older
	 * verifiers (6.1) learn no bound: a mask it cannot drop gives one. */
	barrier_var(l2len);
	l2len &= 31;
	/* What the kernel's ip_rcv drops: a total length shorter than the IP
	 * header or longer than the frame. */
	if (p->l3len < (v4 ? 20 : 40) || (__u32)p->l3len + l2len > (__u32)(end - data))
		return XDP_DROP;
	grow = v4 ? RVS_DSR_OPT4_LEN : RVS_DSR_OPT6_LEN;
	if (v4) {
		/* Constant offsets: the verifier loses a variable one here. */
		struct iphdr *ip = l2len == 14 ? data + 14 : data + 18;

		if ((void *)(ip + 1) > end || ip->ihl != 5)
			return XDP_DROP;
		if (cfg->tun_mtu && (__u32)p->l3len + grow > cfg->tun_mtu &&
		    (ip->frag_off & bpf_htons(0x4000)))
			return icmp_too_big(ctx, p, cfg->tun_mtu - grow);
	} else if (cfg->tun_mtu && (__u32)p->l3len + grow > cfg->tun_mtu) {
		return icmp_too_big(ctx, p, cfg->tun_mtu - grow);
	}
	__builtin_memcpy(svc, p->daddr, 16);
	if (rewrite_addr_port(ctx, p, 1, (const __u32 *)d->addr, nport))
		return XDP_DROP;
	if (v4 ? dsr_opt_insert4(ctx, l2len, svc[0], sport)
	       : dsr_opt_insert6(ctx, l2len, svc, sport))
		return XDP_DROP;
	return l2_out(ctx, d->mac, d->smac, d->ifindex);
}

/* In xdp_lb (forward()): hand the packet and its real server `d` to
 * xdp_dsr_opt. */
static __always_inline int dsr_opt_enter(struct xdp_md *ctx, const struct rvs_dest *d)
{
	__u32 zero = 0;

	if (bpf_map_update_elem(&dsr_tmp, &zero, d, BPF_ANY))
		return XDP_DROP;
	bpf_tail_call(ctx, &dsr_prog, RVS_DSR_PROG);
	return XDP_DROP;
}

/* The body of xdp_dsr_opt (xdp_lb.c). */
static __always_inline int dsr_opt_main(struct xdp_md *ctx)
{
	struct pkt p = {};
	struct rvs_config *cfg;
	struct rvs_dest *d;
	__u32 zero = 0;

	if (parse(ctx, &p))
		return XDP_DROP;
	cfg = bpf_map_lookup_elem(&config, &zero);
	d = bpf_map_lookup_elem(&dsr_tmp, &zero);
	if (!cfg || !d)
		return XDP_DROP;
	return dsr_opt_out(ctx, &p, d, cfg);
}

#endif /* RVS_LIB_DSR_OPT_H */
