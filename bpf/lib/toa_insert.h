// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * lib/toa_insert.h: the director's side of TOA (TCP option kind 254, the
 * client's address and port, in the format of the Alibaba LVS patch's
 * toa.ko and of DPVS; rvs_wire::toa is the codec, bpf/toa.c the real
 * server's reader). For FULLNAT: the real server sees the director's local
 * address as the peer, and learns the client's from this option.
 *
 * int toa_insert(struct xdp_md *ctx, struct pkt *p, __u8 cfamily,
 *                const __u32 caddr[4], __be16 cport, __u16 mtu)
 *
 *   Inserts the TOA carrying (caddr, cport) into the TCP segment `p`
 *   describes (as parse() of lib/parse.h filled it: p->l3off, p->l4off,
 *   p->l3len, p->family, p->proto == IPPROTO_TCP, not an ICMP error).
 *   cfamily is the CLIENT's family: RVS_AF_INET gives the IPv4 form
 *   (kind 254, length 8, port, 4-byte address, caddr[0]), RVS_AF_INET6
 *   the IPv6 form (length 20, 16-byte address; an IPv4 client of an IPv6
 *   real server goes v4-mapped in this form, as rvs_wire::toa says).
 *   caddr and cport are in network order. mtu is the largest IP packet
 *   (IP header included, link header not) the path to the real server
 *   carries; the segment is refused rather than made bigger than it.
 *
 *   The option goes right after the 20-byte TCP header, before the
 *   options already there (where DPVS's tcp_in_add_toa puts it): both
 *   lengths are multiples of 4, so the options behind keep their
 *   alignment. The frame grows at its head (bpf_xdp_adjust_head) and the
 *   link header (Ethernet, one VLAN tag), the IP header (IPv4 options
 *   included) and the fixed TCP header move to the front; the existing
 *   options and the payload stay where they were. Fixed: IPv4 total
 *   length and header checksum, or IPv6 payload length; TCP data offset;
 *   TCP checksum, incrementally (pseudo-header length, the data-offset
 *   word and the option's words), so it is right whether the caller
 *   rewrites addresses and ports before or after. p->l3len grows by the
 *   option's length; p->l3off / p->l4off do not change (the headers keep
 *   their offsets from the new start of the frame). Every pointer into
 *   the packet taken before the call is invalid after it.
 *
 *   Returns TOA_OK (0) when inserted, else the packet is unchanged and
 *   the caller forwards it without the option (counting why):
 *     TOA_ERR_NOROOM  the TCP options already there plus the TOA would
 *                     pass 40 bytes (data offset 15);
 *     TOA_ERR_MTU     the IP packet would pass `mtu`;
 *     TOA_ERR_PKT     not a TCP segment parse() described, a bad data
 *                     offset or IP length, or the frame is shorter than
 *                     its headers say;
 *     TOA_ERR_ADJUST  bpf_xdp_adjust_head refused (no headroom).
 *   TOA_ERR_MOVED is returned only if the frame failed a bounds check
 *   after it grew, which the checks before growing rule out; the frame is
 *   then broken and must be dropped (the verifier needs the check).
 *
 * int toa_mss_clamp(struct xdp_md *ctx, const struct pkt *p, __u16 reduce)
 *
 *   Lowers the MSS option (kind 2, length 4) of the SYN (or SYN-ACK) `p`
 *   describes by `reduce` bytes and fixes the TCP checksum incrementally.
 *   Returns TOA_OK when lowered, TOA_MSS_NONE when the segment has no MSS
 *   option (nothing changed), TOA_ERR_NOROOM when the result would be
 *   below TOA_MSS_MIN (88, the kernel's TCP_MIN_MSS; unchanged),
 *   TOA_ERR_PKT for a malformed option list or not a TCP SYN.
 *
 * The MSS rule. A TOA makes the segment carrying it longer by 8 or 20
 * bytes. If it rides on a segment with payload, that segment may already
 * be as big as the path allows (payload = the MSS the real server
 * announced); so DPVS (src/ipvs/ip_vs_proto_tcp.c, read for this) lowers
 * the MSS option of the real server's SYN-ACK on its way to the client
 * (tcp_out_adjust_mss) by the TOA's length: the client then never sends
 * a segment that the option would push past the MTU. DPVS adds the TOA to
 * the client's SYN and to the first segments that acknowledge the SYN-ACK
 * (the handshake's ACK and data sent before any reply), and before adding
 * checks both the 40-byte option room (EDPVS_NOROOM) and the MTU
 * (EDPVS_FRAG), skipping the option when either fails. We follow DPVS,
 * with one difference in who decides: toa_insert refuses on either limit
 * (the caller's policy decides what to do: forward without the TOA as
 * DPVS does, or drop), and toa_mss_clamp is the SYN-ACK helper. A
 * director that inserts the TOA only into the handshake's final ACK (no
 * payload: 40 + 20 + 20 + 20 bytes at most for IPv6) needs no clamp; the
 * 40-byte option limit is then the only one that can bite. If it inserts
 * into data segments too, it must clamp the real server's SYN-ACK with
 * reduce = the TOA length. A SYN-ACK without an MSS option is left alone
 * (the default MSS, 536 / 1220, leaves room on any path that carries at
 * least 576 / 1280 + the TOA).
 */
#ifndef RVS_LIB_TOA_INSERT_H
#define RVS_LIB_TOA_INSERT_H

#include "lib/parse.h"
#include "lib/csum.h"

#define TOA_OK 0
#define TOA_ERR_NOROOM 1
#define TOA_ERR_MTU 2
#define TOA_ERR_PKT 3
#define TOA_ERR_ADJUST 4
#define TOA_ERR_MOVED 5
#define TOA_MSS_NONE 6

#define TOA_KIND 254
#define TOA_LEN4 8
#define TOA_LEN6 20
/* The kernel's TCP_MIN_MSS: toa_mss_clamp never goes below it. */
#define TOA_MSS_MIN 88

/* The longest head that moves: Ethernet + VLAN tag (18), an IPv4 header
 * with 40 bytes of options (60), the fixed TCP header (20). */
#define TOA_HEAD_MAX (18 + 60 + 20)

/* toa_insert with the option's length a constant (8 or 20), so every
 * access below has a constant offset the verifier checks. */
static __always_inline int toa_insert_len(struct xdp_md *ctx, struct pkt *p, const __u32 caddr[4],
					  __be16 cport, __u16 mtu, const __u32 len)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3off, l4 = p->l4off;
	__u32 head, ohl, doff, old_l4len, new_l4len, acc;
	struct tcphdr *th;
	__u16 *w, old_word, new_word;
	__u8 *opt;
	int i;

	if (l3 > 18 || l4 > 18 + 60 || l4 < l3 + 20)
		return TOA_ERR_PKT;
	/* The barrier keeps clang from dropping the mask after the range
	 * check above (the verifier needs a small bound on the offset). */
	barrier_var(l4);
	th = data + (l4 & 0x7f);
	if ((void *)(th + 1) > end)
		return TOA_ERR_PKT;
	doff = ((__u8 *)th)[12] >> 4;
	if (doff < 5)
		return TOA_ERR_PKT;
	ohl = doff * 4;
	/* The IP length must cover the TCP header, the frame the IP length. */
	if (p->l3len < (l4 - l3) + ohl || l3 + p->l3len > (__u32)(end - data))
		return TOA_ERR_PKT;
	if (ohl - 20 + len > 40)
		return TOA_ERR_NOROOM;
	if ((__u32)p->l3len + len > mtu)
		return TOA_ERR_MTU;
	old_l4len = p->l3len - (l4 - l3);
	new_l4len = old_l4len + len;
	head = l4 + 20;

	if (bpf_xdp_adjust_head(ctx, -(int)len))
		return TOA_ERR_ADJUST;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;

	/* Move the head (link, IP, fixed TCP header) to the front, one
	 * 16-bit word at a time, front to back (the target is below the
	 * source). Every header length here is even. */
	for (i = 0; i < TOA_HEAD_MAX / 2; i++) {
		__u32 o = i * 2;

		if (o >= head)
			break;
		w = data + (o & 0x7f);
		if ((void *)w + len + 2 > end)
			return TOA_ERR_MOVED;
		*w = *(__u16 *)((void *)w + len);
	}

	th = data + (l4 & 0x7f);
	opt = (__u8 *)(th + 1);
	if ((void *)(opt + len) > end)
		return TOA_ERR_MOVED;
	opt[0] = TOA_KIND;
	opt[1] = len;
	__builtin_memcpy(opt + 2, &cport, 2);
	__builtin_memcpy(opt + 4, caddr, len - 4);

	/* TCP checksum: the data-offset word, the pseudo-header's length and
	 * the option's words (added to the sum: they are new). */
	w = (__u16 *)th + 6;
	old_word = *w;
	((__u8 *)th)[12] = ((doff + len / 4) << 4) | (((__u8 *)th)[12] & 0x0f);
	new_word = *w;
	acc = csum_acc16(0, old_word, new_word);
	acc = csum_acc16(acc, bpf_htons(old_l4len), bpf_htons(new_l4len));
#pragma unroll
	for (i = 0; i < len / 2; i++)
		acc += ((__u16 *)opt)[i];

	if (p->family == RVS_AF_INET) {
		struct iphdr *ip = data + (l3 & 0x1f);
		__u16 old_tot;

		if ((void *)(ip + 1) > end)
			return TOA_ERR_MOVED;
		old_tot = ip->tot_len;
		ip->tot_len = bpf_htons(p->l3len + len);
		ip->check = csum_apply(ip->check, csum_acc16(0, old_tot, ip->tot_len));
	} else {
		struct ipv6hdr *ip6 = data + (l3 & 0x1f);

		if ((void *)(ip6 + 1) > end)
			return TOA_ERR_MOVED;
		ip6->payload_len = bpf_htons(new_l4len);
	}
	th->check = csum_apply(th->check, acc);
	p->l3len += len;
	return TOA_OK;
}

static __always_inline int toa_insert(struct xdp_md *ctx, struct pkt *p, __u8 cfamily,
				      const __u32 caddr[4], __be16 cport, __u16 mtu)
{
	if (p->proto != IPPROTO_TCP || p->icmp)
		return TOA_ERR_PKT;
	if (p->family != RVS_AF_INET && p->family != RVS_AF_INET6)
		return TOA_ERR_PKT;
	if (cfamily == RVS_AF_INET)
		return toa_insert_len(ctx, p, caddr, cport, mtu, TOA_LEN4);
	if (cfamily == RVS_AF_INET6)
		return toa_insert_len(ctx, p, caddr, cport, mtu, TOA_LEN6);
	return TOA_ERR_PKT;
}

/* toa_mss_clamp's option walk, one option per bpf_loop step (verified
 * once, where an unrolled or bounded loop over up to 40 options costs the
 * verifier ~120k instructions). Offsets are from the start of the frame. */
struct toa_mss_walk {
	struct xdp_md *ctx;
	__u32 off;     /* the next option */
	__u32 end;     /* the end of the options */
	__u32 mss_off; /* the MSS option found, 0: none */
	int bad;
};

static long toa_mss_step(__u32 i, void *arg)
{
	struct toa_mss_walk *w = arg;
	void *data = (void *)(long)w->ctx->data;
	void *end = (void *)(long)w->ctx->data_end;
	__u32 off = w->off;
	__u8 *o;

	if (off >= w->end)
		return 1;
	barrier_var(off);
	o = data + (off & 0xff);
	if ((void *)(o + 1) > end) {
		w->bad = 1;
		return 1;
	}
	if (o[0] == 0) /* EOL */
		return 1;
	if (o[0] == 1) { /* NOP */
		w->off = off + 1;
		return 0;
	}
	if ((void *)(o + 2) > end || o[1] < 2 || off + o[1] > w->end) {
		w->bad = 1;
		return 1;
	}
	if (o[0] == 2) {
		if (o[1] != 4)
			w->bad = 1;
		else
			w->mss_off = off;
		return 1;
	}
	w->off = off + o[1];
	return 0;
}

static __always_inline int toa_mss_clamp(struct xdp_md *ctx, const struct pkt *p, __u16 reduce)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct toa_mss_walk w = { .ctx = ctx };
	__u32 l4 = p->l4off;
	__u16 old_mss, new_mss;
	struct tcphdr *th;
	__u8 *o;

	if (p->proto != IPPROTO_TCP || p->icmp || !(p->tcpflags & TCPF_SYN))
		return TOA_ERR_PKT;
	if (l4 > 18 + 60)
		return TOA_ERR_PKT;
	/* The barrier keeps clang from dropping the mask after the range
	 * check above (the verifier needs a small bound on the offset). */
	barrier_var(l4);
	th = data + (l4 & 0x7f);
	if ((void *)(th + 1) > end)
		return TOA_ERR_PKT;
	w.off = l4 + 20;
	w.end = l4 + (((__u8 *)th)[12] >> 4) * 4;
	if (w.end < w.off)
		return TOA_ERR_PKT;
	/* At most 40 option bytes: at most 40 options (a NOP is the
	 * shortest). */
	bpf_loop(40, toa_mss_step, &w, 0);
	CALL_SITE_TAG(60);
	if (w.bad)
		return TOA_ERR_PKT;
	if (!w.mss_off)
		return TOA_MSS_NONE;
	barrier_var(w.mss_off);
	o = data + (w.mss_off & 0xff);
	if ((void *)(o + 4) > end)
		return TOA_ERR_PKT;
	__builtin_memcpy(&old_mss, o + 2, 2);
	if (bpf_ntohs(old_mss) < TOA_MSS_MIN + reduce)
		return TOA_ERR_NOROOM;
	new_mss = bpf_htons(bpf_ntohs(old_mss) - reduce);
	/* The checksum sums 16-bit words from the TCP header's start; an MSS
	 * value at an odd offset from it straddles two words and counts
	 * byte-swapped, so the update swaps both values. */
	if ((w.mss_off + 2 - l4) & 1)
		th->check = csum_apply(th->check, csum_acc16(0, __builtin_bswap16(old_mss),
							     __builtin_bswap16(new_mss)));
	else
		th->check = csum_apply(th->check, csum_acc16(0, old_mss, new_mss));
	__builtin_memcpy(o + 2, &new_mss, 2);
	return TOA_OK;
}

#endif /* RVS_LIB_TOA_INSERT_H */
