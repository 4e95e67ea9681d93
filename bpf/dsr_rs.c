// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * dsr_rs.c: the real server's node side of DSR by IP option (the director's
 * RVS_FWD_TUN_OPT, bpf/lib/dsr_opt.h), two tc programs attached to the
 * node's interface toward the director and the clients by `rvsd realserver
 * --mode dsr-opt`:
 *
 * - `rvs_dsr_ingress` (tc ingress): a TCP/UDP packet whose IPv4 header is
 *   followed by the DSR option (type 0x9a, 8 bytes), or whose IPv6 header is
 *   followed by the DSR Destination Options header (24 bytes, option 0x1b),
 *   has its flow (client, real server, protocol) recorded in `dsr_flows`
 *   with the service address:port the option carries, and the option
 *   removed, so the server's socket sees a plain packet from the client.
 * - `rvs_dsr_egress` (tc egress): a packet of a recorded flow going back
 *   (real server -> client) leaves with the service address:port as its
 *   source, straight to the client; a SYN-ACK's MSS is lowered by the
 *   option's length so that the client's segments still fit the MTU once
 *   the director adds the option.
 *
 * Both programs run in the node's namespace, so the server (a pod behind
 * a veth, or a process of the node) needs nothing. Everything else passes
 * untouched: packets without the option (or with other IPv4 options, or
 * IPv4 fragments: an option-carrying fragment keeps the option, which the
 * kernel ignores), replies of flows never seen. Entries live until the LRU
 * evicts them (RVS_DSR_RS_MAX_FLOWS).
 *
 * Checksums: the IPv4 header's is recomputed; the transport checksum does
 * not cover the option, so stripping needs no change there, and the reply
 * rewrite goes through bpf_l3/l4_csum_replace (right for CHECKSUM_PARTIAL
 * packets too). The header bytes are written with BPF_F_RECOMPUTE_CSUM so a
 * CHECKSUM_COMPLETE skb's sum stays right.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "lib/map.h"

#include "rvs.h"
#include "lib/csum.h"
#include "dsr_rs.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

RVS_MAP(dsr_flows, BPF_MAP_TYPE_LRU_HASH, RVS_DSR_RS_MAX_FLOWS, struct rvs_dsr_key,
	struct rvs_dsr_svc);

RVS_MAP(dsr_stats, BPF_MAP_TYPE_PERCPU_ARRAY, RVS_DSR_RS_NSTATS, __u32, __u64);

#define L2 ETH_HLEN
/* Every packet goes on to whatever runs after these programs (the next
 * TCX program, classic tc filters, the stack): TC_ACT_UNSPEC is TCX_NEXT. */
#define NEXT TC_ACT_UNSPEC
/* The kernel's TCP_MIN_MSS: an MSS is never lowered below it. */
#define MSS_MIN 88

/* The tc program `name`: IPv4 packets to `fn4`, IPv6 ones to `fn6`, the
 * rest on. */
#define BY_FAMILY(name, fn4, fn6)                                                  \
	SEC("classifier")                                                          \
	int name(struct __sk_buff *skb)                                            \
	{                                                                          \
		if (skb->protocol == bpf_htons(ETH_P_IP))                          \
			return fn4(skb);                                           \
		if (skb->protocol == bpf_htons(ETH_P_IPV6))                        \
			return fn6(skb);                                           \
		return NEXT;                                                       \
	}

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&dsr_stats, &which);

	if (c)
		*c += 1;
}

/* Make the first `len` bytes direct-readable; 0 when they are. */
static __always_inline int pull(struct __sk_buff *skb, __u32 len)
{
	if ((void *)(long)skb->data + len <= (void *)(long)skb->data_end)
		return 0;
	if (skb->len < len)
		return -1;
	return bpf_skb_pull_data(skb, len);
}

/* Remember the flow's service (when new or changed). */
static __always_inline void record(const struct rvs_dsr_key *k, const struct rvs_dsr_svc *v)
{
	struct rvs_dsr_svc *old = bpf_map_lookup_elem(&dsr_flows, k);
	const __u32 *a, *b;

	if (old && old->port == v->port) {
		a = (const __u32 *)old->addr;
		b = (const __u32 *)v->addr;
		if (a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3])
			return;
	}
	bpf_map_update_elem(&dsr_flows, k, v, BPF_ANY);
}

/* Make the L3 header at L2 (`*l3`), the `hlen` bytes of L3 headers and the
 * 4 bytes of ports after them (`*ports`) direct-readable; -1 when the
 * packet is shorter. */
static __always_inline int l3_hdr(struct __sk_buff *skb, __u32 hlen, void **l3, __be16 **ports)
{
	void *data, *end;

	if (pull(skb, L2 + hlen + 4))
		return -1;
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	*l3 = data + L2;
	*ports = data + L2 + hlen;
	if ((void *)(*ports + 2) > end)
		return -1;
	return 0;
}

/* The flow's key: client `c`:`cport`, real server `b`:`bport`, addresses of
 * `alen` bytes (4 or 16). */
static __always_inline void fill_key(struct rvs_dsr_key *k, __u8 family, __u8 proto,
				     const __u32 *c, const __u32 *b, __u32 alen, __be16 cport,
				     __be16 bport)
{
	k->family = family;
	k->proto = proto;
	__builtin_memcpy(k->caddr, c, alen);
	__builtin_memcpy(k->baddr, b, alen);
	k->cport = cport;
	k->bport = bport;
}

/* Record the flow, remove the option (the `optlen` bytes right after the
 * fixed L3 header) and write the header's changed `n` bytes `hdr` at
 * offset `off`. */
static __always_inline int strip(struct __sk_buff *skb, const struct rvs_dsr_key *k,
				 const struct rvs_dsr_svc *v, __s32 optlen, __u32 off,
				 const void *hdr, __u32 n)
{
	record(k, v);
	if (bpf_skb_adjust_room(skb, -optlen, BPF_ADJ_ROOM_NET, 0)) {
		count(RVS_DSR_RS_FAILED);
		return NEXT;
	}
	if (bpf_skb_store_bytes(skb, off, hdr, n, BPF_F_RECOMPUTE_CSUM))
		return TC_ACT_SHOT;
	count(RVS_DSR_RS_STRIPPED);
	return NEXT;
}

static __always_inline int ingress4(struct __sk_buff *skb)
{
	struct rvs_dsr_key k = {};
	struct rvs_dsr_svc v = {};
	struct iphdr *ip, h;
	struct dsr_opt4 *o;
	__be16 *ports;
	void *l3;

	if (l3_hdr(skb, sizeof(*ip) + RVS_DSR_OPT4_LEN, &l3, &ports))
		return NEXT;
	ip = l3;
	o = (void *)(ip + 1);
	if (ip->version != 4 || ip->ihl != (sizeof(*ip) + RVS_DSR_OPT4_LEN) / 4 ||
	    (ip->frag_off & bpf_htons(0x3fff)) || o->type != RVS_DSR_OPT4_TYPE ||
	    o->len != RVS_DSR_OPT4_LEN ||
	    (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP))
		return NEXT;
	fill_key(&k, RVS_AF_INET, ip->protocol, &ip->saddr, &ip->daddr, 4, ports[0], ports[1]);
	__builtin_memcpy(v.addr, &o->addr, 4);
	v.port = o->port;
	h = *ip;
	h.ihl = 5;
	h.tot_len = bpf_htons(bpf_ntohs(ip->tot_len) - RVS_DSR_OPT4_LEN);
	h.check = 0;
	h.check = ip4_csum(&h);
	return strip(skb, &k, &v, RVS_DSR_OPT4_LEN, L2, &h, sizeof(h));
}

static __always_inline int ingress6(struct __sk_buff *skb)
{
	struct rvs_dsr_key k = {};
	struct rvs_dsr_svc v = {};
	struct ipv6hdr *ip6;
	struct dsr_opt6 *o;
	__be16 *ports;
	void *l3;
	__u8 w[4]; /* payload length, next header, hop limit */

	if (l3_hdr(skb, sizeof(*ip6) + RVS_DSR_OPT6_LEN, &l3, &ports))
		return NEXT;
	ip6 = l3;
	o = (void *)(ip6 + 1);
	if (ip6->version != 6 || ip6->nexthdr != IPPROTO_DSTOPTS ||
	    o->hdrlen != RVS_DSR_OPT6_LEN / 8 - 1 || o->type != RVS_DSR_OPT6_TYPE ||
	    o->len != RVS_DSR_OPT6_OPTLEN ||
	    (o->nexthdr != IPPROTO_TCP && o->nexthdr != IPPROTO_UDP))
		return NEXT;
	fill_key(&k, RVS_AF_INET6, o->nexthdr, ip6->saddr.in6_u.u6_addr32,
		 ip6->daddr.in6_u.u6_addr32, 16, ports[0], ports[1]);
	__builtin_memcpy(v.addr, o->addr, 16);
	v.port = o->port;
	*(__be16 *)w = bpf_htons(bpf_ntohs(ip6->payload_len) - RVS_DSR_OPT6_LEN);
	w[2] = o->nexthdr;
	w[3] = ip6->hop_limit;
	return strip(skb, &k, &v, RVS_DSR_OPT6_LEN, L2 + 4, w, sizeof(w));
}

BY_FAMILY(rvs_dsr_ingress, ingress4, ingress6)

/* Lower the MSS option of the SYN-ACK whose TCP header is at `l4` (its
 * checksum at `csum_off`) by `reduce`. */
static __always_inline void mss_clamp(struct __sk_buff *skb, __u32 l4, __u32 csum_off,
				      __u16 reduce)
{
	__u8 th[14];
	__u32 off, optend, n;

	if (bpf_skb_load_bytes(skb, l4, th, sizeof(th)))
		return;
	if (!(th[13] & 0x02))
		return; /* no SYN */
	optend = (th[12] >> 4) * 4;
	off = sizeof(struct tcphdr);
	for (n = 0; n < 20 && off + 4 <= optend && off < 60; n++) {
		__u8 o[4];
		__be16 old, new;

		if (bpf_skb_load_bytes(skb, l4 + off, o, 2))
			return;
		if (o[0] == 0)
			return; /* end of options */
		if (o[0] == 1) {
			off++;
			continue;
		}
		if (o[1] < 2)
			return;
		if (o[0] != 2 || o[1] != 4) {
			off += o[1];
			continue;
		}
		if (bpf_skb_load_bytes(skb, l4 + off, o, 4))
			return;
		__builtin_memcpy(&old, o + 2, 2);
		if (bpf_ntohs(old) < MSS_MIN + reduce)
			return;
		new = bpf_htons(bpf_ntohs(old) - reduce);
		if (bpf_l4_csum_replace(skb, csum_off, old, new, 2))
			return;
		if (bpf_skb_store_bytes(skb, l4 + off + 2, &new, 2, 0))
			return;
		count(RVS_DSR_RS_MSS);
		return;
	}
}

/* The offset of the L4 checksum of a `proto` packet whose L4 header is at
 * `l4`, and in `*flags` the bpf_l4_csum_replace flags it wants (a UDP
 * checksum 0 stays 0). */
static __always_inline __u32 l4_csum_at(__u8 proto, __u32 l4, __u32 *flags)
{
	if (proto == IPPROTO_TCP) {
		*flags = 0;
		return l4 + offsetof(struct tcphdr, check);
	}
	*flags = BPF_F_MARK_MANGLED_0;
	return l4 + offsetof(struct udphdr, check);
}

/* The end of a rewritten reply: a SYN-ACK's MSS lowered by the option's
 * `reduce` bytes, the reply counted. */
static __always_inline int replied(struct __sk_buff *skb, __u8 proto, __u32 l4, __u32 csum_off,
				   __u16 reduce)
{
	if (proto == IPPROTO_TCP)
		mss_clamp(skb, l4, csum_off, reduce);
	count(RVS_DSR_RS_REPLIED);
	return NEXT;
}

static __always_inline int egress4(struct __sk_buff *skb)
{
	struct rvs_dsr_key k = {};
	struct rvs_dsr_svc *v;
	struct iphdr *ip;
	__be16 *ports;
	void *l3;
	__be32 old, new;
	__be16 oldp;
	__u32 l4 = L2 + sizeof(*ip), csum_off, flags;

	if (l3_hdr(skb, sizeof(*ip), &l3, &ports))
		return NEXT;
	ip = l3;
	if (ip->version != 4 || ip->ihl != 5 || (ip->frag_off & bpf_htons(0x1fff)) ||
	    (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP))
		return NEXT;
	fill_key(&k, RVS_AF_INET, ip->protocol, &ip->daddr, &ip->saddr, 4, ports[1], ports[0]);
	v = bpf_map_lookup_elem(&dsr_flows, &k);
	if (!v)
		return NEXT;
	old = ip->saddr;
	oldp = ports[0];
	__builtin_memcpy(&new, v->addr, 4);
	csum_off = l4_csum_at(k.proto, l4, &flags);
	if (bpf_l4_csum_replace(skb, csum_off, old, new, flags | BPF_F_PSEUDO_HDR | 4) ||
	    bpf_l4_csum_replace(skb, csum_off, oldp, v->port, flags | 2) ||
	    bpf_l3_csum_replace(skb, L2 + offsetof(struct iphdr, check), old, new, 4) ||
	    bpf_skb_store_bytes(skb, L2 + offsetof(struct iphdr, saddr), &new, 4, 0) ||
	    bpf_skb_store_bytes(skb, l4, &v->port, 2, 0))
		return TC_ACT_SHOT;
	return replied(skb, k.proto, l4, csum_off, RVS_DSR_OPT4_LEN);
}

static __always_inline int egress6(struct __sk_buff *skb)
{
	struct rvs_dsr_key k = {};
	struct rvs_dsr_svc *v;
	struct rvs_dsr_svc sv;
	struct ipv6hdr *ip6;
	__be16 *ports;
	void *l3;
	__u8 old[16];
	__u32 l4 = L2 + sizeof(*ip6), csum_off, flags;
	__s64 diff;

	if (l3_hdr(skb, sizeof(*ip6), &l3, &ports))
		return NEXT;
	ip6 = l3;
	if (ip6->version != 6 || (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP))
		return NEXT;
	fill_key(&k, RVS_AF_INET6, ip6->nexthdr, ip6->daddr.in6_u.u6_addr32,
		 ip6->saddr.in6_u.u6_addr32, 16, ports[1], ports[0]);
	v = bpf_map_lookup_elem(&dsr_flows, &k);
	if (!v)
		return NEXT;
	sv = *v;
	__builtin_memcpy(old, k.baddr, 16);
	diff = bpf_csum_diff((__be32 *)old, 16, (__be32 *)sv.addr, 16, 0);
	if (diff < 0)
		return TC_ACT_SHOT;
	csum_off = l4_csum_at(k.proto, l4, &flags);
	if (bpf_l4_csum_replace(skb, csum_off, 0, diff, flags | BPF_F_PSEUDO_HDR) ||
	    bpf_l4_csum_replace(skb, csum_off, k.bport, sv.port, flags | 2) ||
	    bpf_skb_store_bytes(skb, L2 + offsetof(struct ipv6hdr, saddr), sv.addr, 16, 0) ||
	    bpf_skb_store_bytes(skb, l4, &sv.port, 2, 0))
		return TC_ACT_SHOT;
	return replied(skb, k.proto, l4, csum_off, RVS_DSR_OPT6_LEN);
}

BY_FAMILY(rvs_dsr_egress, egress4, egress6)
