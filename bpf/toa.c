// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * toa.c: the client address at the real server without toa.ko.
 *
 * A FULLNAT director sends a connection's packets from its own local
 * address; it carries the client's address in a TCP option (TOA, kind 254:
 * port and IPv4 address in 8 bytes, or port and IPv6 address in 20). Kernel
 * IPVS setups load the out-of-tree toa.ko on every real server to make
 * getpeername(2) return it. This object does the same with three cgroup
 * programs, attached to a cgroup v2 (by `rvsd realserver --toa`):
 *
 * - `rvs_toa_sockops` (sock_ops). On listen(2) (TCP_LISTEN_CB) it sets
 *   TCP_SAVE_SYN on the listener, so the kernel keeps each client's SYN.
 *   When a passive connection is established (PASSIVE_ESTABLISHED_CB) it
 *   looks for a TOA first in the ACK that ended the handshake (where the
 *   Alibaba LVS and DPVS put it) and then in the saved SYN (bpf_getsockopt
 *   TCP_BPF_SYN), and stores the address in the socket's sk_storage.
 *   bpf_load_hdr_opt() cannot be used: for kind 254 it insists on an RFC
 *   6994 magic, which TOA does not have (its port sits there), so the
 *   options are walked here.
 * - `rvs_toa_getpeername4` / `rvs_toa_getpeername6` (cgroup sock_addr).
 *   They return the stored address instead of the director's. accept(2)'s
 *   peer address comes from the same kernel function (inet_getname with
 *   peer set), so the same hook serves it.
 *
 * Families: an IPv4 TOA on an IPv6 socket (a dual-stack listener, the
 * director's address v4-mapped) is returned as ::ffff:a.b.c.d, as toa.ko and
 * DPVS do; an IPv6 TOA on an IPv4 socket cannot be returned through an
 * IPv4 sockaddr and is left out (counted as RVS_TOA_V6_ON_V4).
 *
 * Limits: a listener opened before the programs were attached has no saved
 * SYN, so only an ACK-borne TOA is seen on it (restart the server, or use a
 * director that puts TOA in the ACK). A saved SYN costs its headers' bytes
 * per connection until the socket closes, as with any TCP_SAVE_SYN user.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/socket.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "lib/map.h"

#include "toa.h"

#ifndef SOL_TCP
#define SOL_TCP 6
#endif

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct rvs_toa_addr);
} toa_peers SEC(".maps");

RVS_MAP(toa_stats, BPF_MAP_TYPE_PERCPU_ARRAY, RVS_TOA_NSTATS, __u32, __u64);

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&toa_stats, &which);

	if (c)
		*c += 1;
}

/* The TCP header (with options) being walked: up to 60 bytes. */
#define HDR_MAX 60

/*
 * Walk the options of the TCP header in `hdr` (`len` bytes, the header's
 * own data offset) and decode the first TOA into `out`. Returns 1 found,
 * 0 none, -1 malformed.
 */
static __always_inline int find_toa(const __u8 *hdr, __u32 len, struct rvs_toa_addr *out)
{
	__u32 at = sizeof(struct tcphdr);

	if (len > HDR_MAX)
		len = HDR_MAX;
	/* At most 40 option bytes: at most 40 steps. */
	for (int i = 0; i < 40; i++) {
		if (at >= len || at >= HDR_MAX)
			return 0;
		__u8 kind = hdr[at];

		if (kind == 0)
			return 0;
		if (kind == 1) {
			at += 1;
			continue;
		}
		if (at + 1 >= len || at + 1 >= HDR_MAX)
			return -1;
		__u8 olen = hdr[at + 1];

		if (olen < 2 || at + olen > len)
			return -1;
		if (kind == RVS_TOA_KIND) {
			if (olen == RVS_TOA_LEN4 && at + RVS_TOA_LEN4 <= HDR_MAX) {
				out->family = AF_INET;
				__builtin_memcpy(&out->port, &hdr[at + 2], 2);
				__builtin_memcpy(&out->addr[0], &hdr[at + 4], 4);
				return 1;
			}
			if (olen == RVS_TOA_LEN6 && at + RVS_TOA_LEN6 <= HDR_MAX) {
				out->family = AF_INET6;
				__builtin_memcpy(&out->port, &hdr[at + 2], 2);
				__builtin_memcpy(out->addr, &hdr[at + 4], 16);
				return 1;
			}
			return -1;
		}
		at += olen;
	}
	return 0;
}

/* The TCP data offset of a header copy, in bytes. */
static __always_inline __u32 doff(const __u8 *hdr)
{
	return (__u32)(hdr[12] >> 4) * 4;
}

SEC("sockops")
int rvs_toa_sockops(struct bpf_sock_ops *skops)
{
	if (skops->op == BPF_SOCK_OPS_TCP_LISTEN_CB) {
		int one = 1;

		bpf_setsockopt(skops, SOL_TCP, TCP_SAVE_SYN, &one, sizeof(one));
		return 1;
	}
	if (skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;

	__u8 hdr[HDR_MAX] = {};
	struct rvs_toa_addr toa = {};
	int found = 0;
	__u32 from = RVS_TOA_FROM_ACK;

	/* The ACK that ended the handshake: [skb_data, skb_data_end). */
	__u8 *data = (__u8 *)(long)skops->skb_data;
	__u8 *end = (__u8 *)(long)skops->skb_data_end;
	__u32 n = 0;

	for (int i = 0; i < HDR_MAX; i++) {
		if (data + i + 1 > end)
			break;
		hdr[i] = data[i];
		n = i + 1;
	}
	if (n >= sizeof(struct tcphdr)) {
		__u32 l = doff(hdr);

		if (l <= n)
			found = find_toa(hdr, l, &toa);
	}
	if (found == 0) {
		/* The saved SYN (TCP header only). */
		long got = bpf_getsockopt(skops, SOL_TCP, TCP_BPF_SYN, hdr, sizeof(hdr));

		if (got >= (long)sizeof(struct tcphdr)) {
			__u32 l = doff(hdr);

			if (l <= (__u32)got)
				found = find_toa(hdr, l, &toa);
			from = RVS_TOA_FROM_SYN;
		}
	}
	if (found < 0) {
		count(RVS_TOA_BAD);
		return 1;
	}
	if (found == 0) {
		count(RVS_TOA_NONE);
		return 1;
	}
	struct bpf_sock *sk = skops->sk;

	if (!sk)
		return 1;
	struct rvs_toa_addr *st = bpf_sk_storage_get(&toa_peers, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (!st)
		return 1;
	*st = toa;
	count(from);
	return 1;
}

/* 32-bit word `i` of the stored address, network order as stored. */
static __always_inline __u32 word(const struct rvs_toa_addr *a, int i)
{
	__u32 w;

	__builtin_memcpy(&w, &a->addr[i * 4], 4);
	return w;
}

/* The address stored for the socket of a getpeername(2) or accept(2):
 * NULL when there is none (no TOA, or not a TCP socket the reader saw). */
static __always_inline struct rvs_toa_addr *stored(struct bpf_sock_addr *ctx)
{
	struct bpf_sock *sk = ctx->sk;

	if (!sk)
		return NULL;
	return bpf_sk_storage_get(&toa_peers, sk, 0, 0);
}

SEC("cgroup/getpeername4")
int rvs_toa_getpeername4(struct bpf_sock_addr *ctx)
{
	struct rvs_toa_addr *st = stored(ctx);

	if (!st)
		return 1;
	if (st->family == AF_INET) {
		ctx->user_ip4 = word(st, 0);
		ctx->user_port = st->port;
	} else if (st->family == AF_INET6) {
		count(RVS_TOA_V6_ON_V4);
	}
	return 1;
}

SEC("cgroup/getpeername6")
int rvs_toa_getpeername6(struct bpf_sock_addr *ctx)
{
	struct rvs_toa_addr *st = stored(ctx);

	if (!st)
		return 1;
	if (st->family == AF_INET6) {
		ctx->user_ip6[0] = word(st, 0);
		ctx->user_ip6[1] = word(st, 1);
		ctx->user_ip6[2] = word(st, 2);
		ctx->user_ip6[3] = word(st, 3);
		ctx->user_port = st->port;
	} else if (st->family == AF_INET) {
		/* ::ffff:a.b.c.d */
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = bpf_htonl(0xffff);
		ctx->user_ip6[3] = word(st, 0);
		ctx->user_port = st->port;
		count(RVS_TOA_MAPPED);
	}
	return 1;
}
