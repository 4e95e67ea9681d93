// SPDX-License-Identifier: MIT OR Apache-2.0
/* sock_lb.c: the socket-level data plane (crates/sock). cgroup v2 programs
 * that choose a real server when a local process connects to (TCP,
 * connected UDP) or sends to (unconnected UDP) a virtual service, and put
 * the real server's address into the socket call itself: the connection is
 * made to the real server from the start, so no packet is ever rewritten.
 * getpeername and recvmsg give the application the virtual address back.
 * sock_release keeps the per-real-server count of open sockets that the
 * least-connection schedulers read.
 *
 * The control side (crates/sock/src/maps.rs) owns every table: the real
 * servers' list per service holds only the schedulable ones (weight > 0,
 * available), the sh/dh/mh tables and the wrr cycle are rvs-core's own.
 * The schedulers are the director's (lib/sched_pick.h); the layouts are
 * in sock.h. */

#include <linux/bpf.h>
#include <linux/errno.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "lib/map.h"
#include "sock.h"
/* The kernel headers, CALL_SITE_TAG and the hashes (lib/sched_pick.h
 * includes it too). */
#include "lib/hash.h"

RVS_MAP(sock_services, BPF_MAP_TYPE_HASH, RVS_SOCK_SVC_MAX, struct rvs_sock_svc_key,
	struct rvs_sock_svc);
RVS_MAP(sock_dests, BPF_MAP_TYPE_ARRAY, RVS_SOCK_DEST_MAX, __u32, struct rvs_sock_dest);
RVS_MAP(sock_slots, BPF_MAP_TYPE_ARRAY, RVS_SOCK_SLOTS, __u32, __u32);
RVS_MAP(sock_stats, BPF_MAP_TYPE_ARRAY, RVS_SOCK_DEST_MAX, __u32,
	struct rvs_sock_dest_stats);
RVS_MAP(sock_cursor, BPF_MAP_TYPE_ARRAY, RVS_SOCK_SVC_MAX, __u32, __u64);
RVS_MAP(sock_socks, BPF_MAP_TYPE_LRU_HASH, RVS_SOCK_SOCKS_MAX, __u64, struct rvs_sock_rec);
RVS_MAP(sock_persist, BPF_MAP_TYPE_LRU_HASH, RVS_SOCK_PERSIST_MAX,
	struct rvs_sock_persist_key, struct rvs_sock_persist);

/* The client source ranges of the services flagged
 * RVS_SOCK_SVC_F_SRC_RANGES, by service id and address (the director's key,
 * rvs.h; see sock.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, RVS_SRC_RANGES_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rvs_src_key);
	__type(value, __u8);
} sock_src_ranges SEC(".maps");

/* Per-CPU event counters (RVS_SOCK_CNT_*), read by the control side for
 * rvsd's metrics: one per-CPU add, no shared cache line. */
RVS_MAP(sock_counters, BPF_MAP_TYPE_PERCPU_ARRAY, RVS_SOCK_CNT_MAX, __u32, __u64);

static __always_inline void bump(__u32 what)
{
	__u64 *c = bpf_map_lookup_elem(&sock_counters, &what);

	if (c)
		*c += 1;
}

/* What lib/sched_pick.h (the director's schedulers, shared) reads, over
 * this plane's maps. */
#define SCHED_DEST struct rvs_sock_dest
#define SCHED_LIST_MAX RVS_SOCK_LIST_MAX

static __always_inline __u32 slot_at(__u32 pos)
{
	__u32 *v = bpf_map_lookup_elem(&sock_slots, &pos);

	return v ? *v : RVS_SLOT_EMPTY;
}

/* A real server a new socket may be given (weight > 0, in its service). */
static __always_inline struct rvs_sock_dest *eligible(__u32 idx)
{
	struct rvs_sock_dest *d;

	if (idx == RVS_SLOT_EMPTY)
		return 0;
	d = bpf_map_lookup_elem(&sock_dests, &idx);
	if (!d || !(d->flags & RVS_SOCK_DEST_F_PRESENT) || d->weight == 0)
		return 0;
	return d;
}

/* rr and wrr: one atomic counter per service, so the n-th socket of all
 * CPUs together gets position n: exact counts. */
static __always_inline __u64 *sched_cursor_of(__u32 svc_id)
{
	return bpf_map_lookup_elem(&sock_cursor, &svc_id);
}

/* The least-connection schedulers count open sockets (a socket has no
 * inactive state). */
static __always_inline void dest_load(__u32 idx, __u64 *active, __u64 *inactive)
{
	struct rvs_sock_dest_stats *st = bpf_map_lookup_elem(&sock_stats, &idx);

	if (st)
		*active = st->active;
	*inactive = 0;
}

#include "lib/sched_pick.h"

/* The real server for a new socket: sh/mh hash the socket's bound source
 * address (and port with sh-port/mh-port), dh the VIP. */
static __always_inline __u32 schedule(const struct rvs_sock_svc *s,
				      const struct rvs_sock_svc_key *k, const __u32 *saddr,
				      __u16 sport)
{
	int fallback = s->flags & RVS_SOCK_SVC_F_FALLBACK;
	int with_port = s->flags & RVS_SOCK_SVC_F_PORT;

	switch (s->sched) {
	case RVS_SCHED_RR:
		return sched_cursor(s->id, s->list_off, s->list_len);
	case RVS_SCHED_WRR:
		return sched_cursor(s->id, s->table_off, s->table_len);
	case RVS_SCHED_LC:
	case RVS_SCHED_WLC:
	case RVS_SCHED_SED:
	case RVS_SCHED_NQ:
		return sched_least(s->list_off, s->list_len, s->sched);
	case RVS_SCHED_DH:
		return sched_dh(s->table_off, s->table_len, k->addr, k->family);
	case RVS_SCHED_SH:
		return sched_sh(s->table_off, s->table_len, fallback, with_port, saddr, k->family,
				sport);
	case RVS_SCHED_MH:
		return sched_mh(&s->table_off, fallback, with_port, saddr, k->family, sport);
	default:
		return RVS_SLOT_EMPTY;
	}
}

/* Persistence: the client (the socket's bound source address, zero when
 * unbound: the host) keeps its real server while the template lives and
 * the server is in the service; every new socket renews it. */
static __always_inline __u32 schedule_persistent(const struct rvs_sock_svc *s,
						 const struct rvs_sock_svc_key *k,
						 const __u32 *saddr, __u16 sport)
{
	struct rvs_sock_persist_key pk = { .svc = s->id };
	struct rvs_sock_persist np = {};
	struct rvs_sock_persist *p;
	struct rvs_sock_dest *d;
	__u64 now = bpf_ktime_get_ns();
	__u32 idx;

	pk.client[0] = saddr[0];
	pk.client[1] = saddr[1];
	pk.client[2] = saddr[2];
	pk.client[3] = saddr[3];
	p = bpf_map_lookup_elem(&sock_persist, &pk);
	if (p && p->expires_ns > now) {
		idx = p->dest;
		d = bpf_map_lookup_elem(&sock_dests, &idx);
		if (d && (d->flags & RVS_SOCK_DEST_F_PRESENT)) {
			p->expires_ns = now + (__u64)s->persist_secs * 1000000000ull;
			return idx;
		}
	}
	idx = schedule(s, k, saddr, sport);
	if (idx == RVS_SLOT_EMPTY)
		return idx;
	np.dest = idx;
	np.expires_ns = now + (__u64)s->persist_secs * 1000000000ull;
	bpf_map_update_elem(&sock_persist, &pk, &np, BPF_ANY);
	return idx;
}

static __always_inline void count(__u32 idx, __s64 delta_active, __u64 delta_total)
{
	struct rvs_sock_dest_stats *st = bpf_map_lookup_elem(&sock_stats, &idx);

	if (!st)
		return;
	if (delta_active)
		__sync_fetch_and_add(&st->active, (__u64)delta_active);
	if (delta_total)
		__sync_fetch_and_add(&st->total, delta_total);
}

/* A socket leaves the real server it had (reconnect, release). */
static __always_inline void forget(const struct rvs_sock_rec *old)
{
	count(old->dest, -1, 0);
}

/* The service for a destination address, or 0 (not a VIP: untouched). */
static __always_inline const struct rvs_sock_svc *service(struct rvs_sock_svc_key *k)
{
	return bpf_map_lookup_elem(&sock_services, k);
}

static __always_inline int same_vip(const struct rvs_sock_svc_key *a, const struct rvs_sock_svc_key *b)
{
	return a->port == b->port && a->proto == b->proto && a->family == b->family &&
	       a->addr[0] == b->addr[0] && a->addr[1] == b->addr[1] && a->addr[2] == b->addr[2] &&
	       a->addr[3] == b->addr[3];
}

/* Schedule (or, for a UDP socket sending to the same service again, keep)
 * a real server for socket `cookie` and record it. Returns the dest or 0
 * when the service has none to give.
 *
 * The record is the socket's only entry: getpeername and recvmsg find the
 * VIP from it by the socket's cookie. connect (keep == 0) does not look for
 * an earlier record first: it inserts with BPF_NOEXIST and only when the
 * socket had one (a connect again after a failed one, a UDP socket
 * connected after sending elsewhere) reads it to uncount its server. */
static __always_inline const struct rvs_sock_dest *pick(__u64 cookie, const struct rvs_sock_svc *s,
						    const struct rvs_sock_svc_key *k,
						    const __u32 *saddr, __u16 sport, int keep)
{
	struct rvs_sock_rec rec = {}, *old;
	struct rvs_sock_dest *d;
	__u32 idx;
	long err;

	if (keep) {
		old = bpf_map_lookup_elem(&sock_socks, &cookie);
		if (old && same_vip(&old->vip, k)) {
			idx = old->dest;
			d = bpf_map_lookup_elem(&sock_dests, &idx);
			/* A drained (weight 0) server keeps its flows; a
			 * deleted one is left for a new choice, as IPVS
			 * reschedules. */
			if (d && (d->flags & RVS_SOCK_DEST_F_PRESENT)) {
				bump(RVS_SOCK_CNT_UDP_KEPT);
				return d;
			}
		}
	}
	idx = s->persist_secs ? schedule_persistent(s, k, saddr, sport)
			      : schedule(s, k, saddr, sport);
	d = eligible(idx);
	if (!d) {
		bump(RVS_SOCK_CNT_NO_DEST);
		return 0;
	}
	bump(k->proto == IPPROTO_UDP ? RVS_SOCK_CNT_UDP : RVS_SOCK_CNT_TCP);
	rec.vip = *k;
	rec.dest = idx;
	err = bpf_map_update_elem(&sock_socks, &cookie, &rec, BPF_NOEXIST);
	if (err == -EEXIST) {
		old = bpf_map_lookup_elem(&sock_socks, &cookie);
		if (old)
			forget(old);
		err = bpf_map_update_elem(&sock_socks, &cookie, &rec, BPF_ANY);
	}
	/* Counted only when recorded: sock_release uncounts what it finds. */
	if (err == 0)
		count(idx, 1, 1);
	return d;
}

/* Whether a client whose source is `src` (`family`; all zero: not bound,
 * the kernel picks it by route) may reach service `s`: always without
 * source ranges; a bound source when a range of the service holds it; an
 * unbound socket when the control side found the route's source toward
 * the VIP in a range (RVS_SOCK_SVC_F_NODE_OK). A refusal is counted. */
static __always_inline int src_allowed(const struct rvs_sock_svc *s, const __u32 *src,
				       __u8 family)
{
	struct rvs_src_key k = {};

	if (!(s->flags & RVS_SOCK_SVC_F_SRC_RANGES))
		return 1;
	if (!(src[0] | src[1] | src[2] | src[3])) {
		if (s->flags & RVS_SOCK_SVC_F_NODE_OK)
			return 1;
	} else {
		k.prefixlen = 32 + (family == RVS_AF_INET6 ? 128 : 32);
		k.svc = s->id;
		__builtin_memcpy(k.addr, src, 16);
		if (bpf_map_lookup_elem(&sock_src_ranges, &k))
			return 1;
	}
	bump(RVS_SOCK_CNT_REFUSED_SRC);
	return 0;
}

static __always_inline __u8 sock_proto(struct bpf_sock_addr *ctx)
{
	return ctx->protocol == IPPROTO_UDP ? IPPROTO_UDP : IPPROTO_TCP;
}

/* IPv4 connect and sendmsg. Returns 1 (go on) or 0 (EPERM: a VIP without a
 * real server to give, or a client outside its source ranges). */
static __always_inline int do4(struct bpf_sock_addr *ctx, int keep)
{
	struct rvs_sock_svc_key k = {};
	const struct rvs_sock_svc *s;
	const struct rvs_sock_dest *d;
	__u32 saddr[4] = {}, src[4] = {};
	__u16 sport = 0;
	struct bpf_sock *sk;

	if (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP)
		return 1;
	k.addr[0] = ctx->user_ip4;
	k.port = (__u16)ctx->user_port;
	k.proto = sock_proto(ctx);
	k.family = RVS_AF_INET;
	s = service(&k);
	if (!s)
		return 1;
	sk = ctx->sk;
	if (sk) {
		saddr[0] = sk->src_ip4;
		sport = bpf_htons((__u16)sk->src_port);
	}
	/* The source the datagram leaves from: IP_PKTINFO's, else the bound
	 * one (sendmsg only: `keep` is a constant, the other hooks never read
	 * msg_src_ip4). */
	src[0] = saddr[0];
	if (keep && ctx->msg_src_ip4)
		src[0] = ctx->msg_src_ip4;
	if (!src_allowed(s, src, RVS_AF_INET))
		return 0;
	d = pick(bpf_get_socket_cookie(ctx), s, &k, saddr, sport, keep);
	if (!d)
		return 0;
	ctx->user_ip4 = d->addr[0];
	ctx->user_port = d->port;
	return 1;
}

static __always_inline int is_v4_mapped(const __u32 *a)
{
	return a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff);
}

static __always_inline int do6(struct bpf_sock_addr *ctx, int keep)
{
	struct rvs_sock_svc_key k = {};
	const struct rvs_sock_svc *s;
	const struct rvs_sock_dest *d;
	__u32 saddr[4] = {}, src[4] = {}, b[4] = {};
	__u16 sport = 0;
	struct bpf_sock *sk;
	__u32 a[4];
	int mapped;

	if (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP)
		return 1;
	a[0] = ctx->user_ip6[0];
	a[1] = ctx->user_ip6[1];
	a[2] = ctx->user_ip6[2];
	a[3] = ctx->user_ip6[3];
	mapped = is_v4_mapped(a);
	if (mapped) {
		/* A dual-stack socket reaching an IPv4 VIP. */
		k.addr[0] = a[3];
		k.family = RVS_AF_INET;
	} else {
		k.addr[0] = a[0];
		k.addr[1] = a[1];
		k.addr[2] = a[2];
		k.addr[3] = a[3];
		k.family = RVS_AF_INET6;
	}
	k.port = (__u16)ctx->user_port;
	k.proto = sock_proto(ctx);
	s = service(&k);
	if (!s)
		return 1;
	sk = ctx->sk;
	if (sk) {
		b[0] = sk->src_ip6[0];
		b[1] = sk->src_ip6[1];
		b[2] = sk->src_ip6[2];
		b[3] = sk->src_ip6[3];
	}
	if (sk && !mapped) {
		saddr[0] = b[0];
		saddr[1] = b[1];
		saddr[2] = b[2];
		saddr[3] = b[3];
		sport = bpf_htons((__u16)sk->src_port);
	}
	/* The source for the ranges: IP_PKTINFO's (sendmsg), else the bound
	 * one; an IPv4 VIP's in the last word of a mapped address. */
	if (keep && (ctx->msg_src_ip6[0] | ctx->msg_src_ip6[1] | ctx->msg_src_ip6[2] |
		     ctx->msg_src_ip6[3])) {
		b[0] = ctx->msg_src_ip6[0];
		b[1] = ctx->msg_src_ip6[1];
		b[2] = ctx->msg_src_ip6[2];
		b[3] = ctx->msg_src_ip6[3];
	}
	if (mapped) {
		if (is_v4_mapped(b))
			src[0] = b[3];
	} else {
		src[0] = b[0];
		src[1] = b[1];
		src[2] = b[2];
		src[3] = b[3];
	}
	if (!src_allowed(s, src, k.family))
		return 0;
	d = pick(bpf_get_socket_cookie(ctx), s, &k, saddr, sport, keep);
	if (!d)
		return 0;
	if (mapped) {
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = bpf_htonl(0xffff);
		ctx->user_ip6[3] = d->addr[0];
	} else {
		ctx->user_ip6[0] = d->addr[0];
		ctx->user_ip6[1] = d->addr[1];
		ctx->user_ip6[2] = d->addr[2];
		ctx->user_ip6[3] = d->addr[3];
	}
	ctx->user_port = d->port;
	return 1;
}

/* Note the socket's own address in its record (for -Lcn), once. */
static __always_inline void note_client(struct rvs_sock_rec *rec, const __u32 *addr, __u16 port_net)
{
	if (rec->client_port || !port_net)
		return;
	rec->client[0] = addr[0];
	rec->client[1] = addr[1];
	rec->client[2] = addr[2];
	rec->client[3] = addr[3];
	rec->client_port = port_net;
}

static __always_inline void note_udp_client4(struct bpf_sock_addr *ctx, struct rvs_sock_rec *rec)
{
	struct bpf_sock *sk = ctx->sk;
	__u32 a[4] = {};

	if (!sk)
		return;
	a[0] = sk->src_ip4;
	note_client(rec, a, bpf_htons((__u16)sk->src_port));
}

static __always_inline void note_udp_client6(struct bpf_sock_addr *ctx, struct rvs_sock_rec *rec)
{
	struct bpf_sock *sk = ctx->sk;
	__u32 a[4] = {};

	if (!sk)
		return;
	a[0] = sk->src_ip6[0];
	a[1] = sk->src_ip6[1];
	a[2] = sk->src_ip6[2];
	a[3] = sk->src_ip6[3];
	note_client(rec, a, bpf_htons((__u16)sk->src_port));
}

/* Whether `a`/`family`/`port` (a peer the kernel reports) is the real
 * server `rec` was given. Its `sock_dests` element holds that server while
 * the record lives: an index is reused only once no socket counts on it. */
static __always_inline int is_given(const struct rvs_sock_rec *rec, const __u32 *a, __u8 family,
				    __u16 port)
{
	__u32 idx = rec->dest;
	struct rvs_sock_dest *d = bpf_map_lookup_elem(&sock_dests, &idx);

	return d && d->port == port && d->family == family && d->addr[0] == a[0] &&
	       d->addr[1] == a[1] && d->addr[2] == a[2] && d->addr[3] == a[3];
}

/* The peer a socket sees (getpeername, recvmsg's source): the real server
 * this socket was given becomes the VIP again. */
static __always_inline void rev4(struct bpf_sock_addr *ctx, const struct rvs_sock_rec *rec)
{
	__u32 a[4] = {};

	a[0] = ctx->user_ip4;
	if (!is_given(rec, a, RVS_AF_INET, (__u16)ctx->user_port))
		return;
	ctx->user_ip4 = rec->vip.addr[0];
	ctx->user_port = rec->vip.port;
}

static __always_inline void rev6(struct bpf_sock_addr *ctx, const struct rvs_sock_rec *rec)
{
	__u32 a[4];
	__u8 family = RVS_AF_INET6;

	a[0] = ctx->user_ip6[0];
	a[1] = ctx->user_ip6[1];
	a[2] = ctx->user_ip6[2];
	a[3] = ctx->user_ip6[3];
	if (is_v4_mapped(a)) {
		a[0] = a[3];
		a[1] = 0;
		a[2] = 0;
		a[3] = 0;
		family = RVS_AF_INET;
	}
	if (!is_given(rec, a, family, (__u16)ctx->user_port))
		return;
	if (family == RVS_AF_INET) {
		ctx->user_ip6[3] = rec->vip.addr[0];
	} else {
		ctx->user_ip6[0] = rec->vip.addr[0];
		ctx->user_ip6[1] = rec->vip.addr[1];
		ctx->user_ip6[2] = rec->vip.addr[2];
		ctx->user_ip6[3] = rec->vip.addr[3];
	}
	ctx->user_port = rec->vip.port;
}

static __always_inline struct rvs_sock_rec *record(__u64 cookie)
{
	return bpf_map_lookup_elem(&sock_socks, &cookie);
}

/* The cgroup sock_addr program `name` (section `sec`) that translates
 * the call's address: `fn` (do4/do6) with its `keep` (1 for sendmsg). */
#define SOCK_ADDR_DO(sec, name, fn, keep)                                          \
	SEC(sec)                                                                   \
	int name(struct bpf_sock_addr *ctx)                                        \
	{                                                                          \
		return fn(ctx, keep);                                              \
	}

SOCK_ADDR_DO("cgroup/connect4", sock_connect4, do4, 0)
SOCK_ADDR_DO("cgroup/connect6", sock_connect6, do6, 0)
SOCK_ADDR_DO("cgroup/sendmsg4", sock_sendmsg4, do4, 1)
SOCK_ADDR_DO("cgroup/sendmsg6", sock_sendmsg6, do6, 1)

/* The cgroup sock_addr program `name` (section `sec`) for the sockets the
 * plane translated: `note` learns from the call (the UDP client), then
 * `rev` (rev4/rev6) shows the service's address, not the real server's. */
#define SOCK_ADDR_REV(sec, name, note, rev)                                        \
	SEC(sec)                                                                   \
	int name(struct bpf_sock_addr *ctx)                                        \
	{                                                                          \
		struct rvs_sock_rec *rec = record(bpf_get_socket_cookie(ctx));     \
                                                                                   \
		if (rec) {                                                         \
			note(ctx, rec);                                            \
			rev(ctx, rec);                                             \
		}                                                                  \
		return 1;                                                          \
	}

/* getpeername(2) learns nothing. */
static __always_inline void no_note(struct bpf_sock_addr *ctx, struct rvs_sock_rec *rec)
{
}


SOCK_ADDR_REV("cgroup/recvmsg4", sock_recvmsg4, note_udp_client4, rev4)

SOCK_ADDR_REV("cgroup/recvmsg6", sock_recvmsg6, note_udp_client6, rev6)

static __always_inline void note_tcp_client(__u64 cookie, const __u32 *addr, __u16 port_net)
{
	struct rvs_sock_rec *rec = record(cookie);

	if (rec)
		note_client(rec, addr, port_net);
}

/* A TCP socket sends its SYN: its own address is known now. (One call per
 * branch: with the reads after a join, clang offsets the context pointer,
 * which the verifier refuses.) */
SEC("sockops")
int sock_ops(struct bpf_sock_ops *ctx)
{
	__u32 a[4] = {};
	__u16 port;

	if (ctx->op != BPF_SOCK_OPS_TCP_CONNECT_CB)
		return 1;
	port = bpf_htons((__u16)ctx->local_port);
	if (ctx->family == RVS_AF_INET) {
		a[0] = ctx->local_ip4;
		note_tcp_client(bpf_get_socket_cookie(ctx), a, port);
		return 1;
	}
	a[0] = ctx->local_ip6[0];
	a[1] = ctx->local_ip6[1];
	a[2] = ctx->local_ip6[2];
	a[3] = ctx->local_ip6[3];
	note_tcp_client(bpf_get_socket_cookie(ctx), a, port);
	return 1;
}

SOCK_ADDR_REV("cgroup/getpeername4", sock_getpeername4, no_note, rev4)

SOCK_ADDR_REV("cgroup/getpeername6", sock_getpeername6, no_note, rev6)

/* A socket closes: its real server has one open socket less. */
SEC("cgroup/sock_release")
int sock_release(struct bpf_sock *ctx)
{
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct rvs_sock_rec *old = bpf_map_lookup_elem(&sock_socks, &cookie);

	if (old) {
		forget(old);
		bpf_map_delete_elem(&sock_socks, &cookie);
	}
	return 1;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
