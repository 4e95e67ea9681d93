// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * xdp_lb.c: the rvs director program (XDP).
 *
 * Packet path: Ethernet (+ one 802.1Q/802.1ad tag) -> IPv4 (options honoured)
 * or IPv6 (no extension headers) -> TCP/UDP -> flow lookup (hit: refresh
 * state, count, forward) -> miss: service lookup, schedule, insert ->
 * forward by the real server's method: DR (MAC rewrite), TUN IPIP, TUN GUE,
 * NAT (inbound rewrite; replies rewritten back by the reply path).
 * IPv4 flows live in flows4 (16-byte key), IPv6 flows in flows. The most
 * common packet (an ACK or datagram of an established DR flow) takes a
 * fast path in front of all this (fast_established; fast_established6 for
 * IPv6), which finds the flow in a per-CPU cache (flow_cache; flow6_cache)
 * before it looks at flows4 (flows).
 *
 * The flow table comes first, as in IPVS's ip_vs_in (connection lookup
 * before the service): only VIP traffic creates flows, an established flow
 * costs one hash lookup, and flows of a deleted service keep going until
 * they expire or the control side removes them (IPVS keeps such
 * connections too). Expiry: an entry older than its state's timeout is
 * treated as absent (a SYN or a UDP datagram is scheduled afresh at once).
 *
 * Decisions about packets that are not plainly ours (all return XDP_PASS, so
 * the kernel's own stack judges them, counts them and answers as it would
 * without rvs):
 *  - non-IP, non-TCP/UDP, non-VIP traffic (ICMP errors about a flow
 *    excepted: they go where the flow goes, rewritten for NAT flows);
 *  - truncated or malformed headers (never read out of bounds; the kernel
 *    drops and counts them in its own statistics);
 *  - IPv4 fragments: only the first fragment carries ports, so a flow lookup
 *    is impossible for the others; the kernel reassembles them (a later part
 *    may forward fragments by an (addr, id) table);
 *  - IPv6 extension headers (including fragments), for the same reason;
 *  - a TCP segment without SYN (or with RST) for an unknown flow: IPVS does
 *    not schedule it (tcp_conn_schedule) and lets it continue (NF_ACCEPT);
 *  - no real server available: the kernel answers (RST / port unreachable)
 *    as IPVS's ip_vs_leave does.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "rvs.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* ------------------------------------------------------------------ maps */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RVS_MAX_SERVICES);
	__type(key, struct rvs_svc_key);
	__type(value, __u32);
} services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RVS_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct rvs_svc);
} svc_info SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RVS_SLOTS_DEFAULT);
	__type(key, __u32);
	__type(value, __u32);
} slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RVS_MAX_DESTS);
	__type(key, __u32);
	__type(value, struct rvs_dest);
} dests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RVS_FLOWS_DEFAULT);
	__type(key, struct rvs_flow_key);
	__type(value, struct rvs_flow);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RVS_FLOWS_DEFAULT);
	__type(key, struct rvs_flow4_key);
	__type(value, struct rvs_flow);
} flows4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RVS_FLOW_CACHE_SIZE);
	__type(key, __u32);
	__type(value, struct rvs_flow_cache);
} flow_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RVS_FLOW6_CACHE_SIZE);
	__type(key, __u32);
	__type(value, struct rvs_flow6_cache);
} flow6_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RVS_FLOW_EPOCHS);
	__type(key, __u32);
	__type(value, __u32);
} flow_epochs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RVS_FLOWS_DEFAULT);
	__type(key, struct rvs_nat_key);
	__type(value, struct rvs_nat);
} nat_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RVS_FLOWS_DEFAULT);
	__type(key, struct rvs_persist_key);
	__type(value, struct rvs_persist);
} persist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RVS_MAX_SERVICES);
	__type(key, __u32);
	__type(value, __u64);
} rr_cursor SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RVS_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct rvs_stats);
} svc_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RVS_MAX_DESTS);
	__type(key, __u32);
	__type(value, struct rvs_stats);
} dest_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rvs_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rvs_flood);
} flood SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RVS_MAX_DESTS);
	__type(key, __u32);
	__type(value, struct rvs_dest_conns);
} dest_conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RVS_LOCALITY_MAX);
	__type(key, struct rvs_locality_key);
	__type(value, struct rvs_locality);
} locality SEC(".maps");

/* lblc / lblcr: one pass over the service's list finds the WLC choice, the
 * kernel's "some server is less than half loaded" (active * 2 < weight, any
 * server of the list), and which cached members are still in the list (a
 * member that left the service is never used, even if its index was
 * given to another service's server since). */
struct locality_pass {
	__u32 off;
	__u32 best; /* WLC over the service */
	__u64 best_cost;
	__u64 best_w;
	__u32 count; /* cached members (in locality_tmp) */
	__u8 half;
	__u8 pad[3];
};

/* Per-CPU room for lblc/lblcr's pass, key and new entry (the 512-byte
 * stack is mostly the main program's). */
struct locality_scratch {
	struct locality_pass x;
	struct rvs_locality_key k;
	struct rvs_locality ne;
	__u32 members[RVS_LBLCR_SET_MAX]; /* the cached members */
	__u8 found[RVS_LBLCR_SET_MAX];    /* ... that are in the service's list */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct locality_scratch);
} locality_tmp SEC(".maps");

#ifdef RVS_BENCH_VARY_CLIENT
/* Benchmark build only: a per-CPU counter that makes every run a new client. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} bench_seq SEC(".maps");
#endif
#ifdef RVS_BENCH_CYCLE_FLOWS
#include "bench_cycle.h"
#endif

/* ------------------------------------------------------- parsed packet */

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

struct pkt {
	__u32 saddr[4]; /* network order, IPv4 in [0] */
	__u32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u16 l3len; /* IP total length: what IPVS counts as bytes */
	__u16 l3off; /* offset of the IP header from data */
	__u16 l4off; /* offset of the TCP/UDP header from data */
	__u8 family;
	__u8 proto;
	__u8 tcpflags;
	__u8 icmp; /* an ICMP error about a flow: the fields describe the flow */
	__u8 pad[2];
};

#define TCPF_FIN 0x01
#define TCPF_SYN 0x02
#define TCPF_RST 0x04
#define TCPF_ACK 0x10

/* An ICMP(v6) error (destination unreachable incl. fragmentation needed /
 * packet too big, time exceeded) quoting a packet our side sent (from the
 * VIP to a client): describe the flow it belongs to, as the client sent it,
 * so the error reaches the same real server (PMTU discovery for DR/TUN). */
static __always_inline int parse_icmp_error(struct pkt *p, void *l4, void *end)
{
	__u8 *ic = l4;
	void *inner = ic + 8;
	__be16 *ports;

	if ((void *)(ic + 8) > end)
		return -1;
	if (p->family == RVS_AF_INET) {
		struct iphdr *iip = inner;

		if (ic[0] != 3 && ic[0] != 11)
			return -1;
		if ((void *)(iip + 1) > end || iip->version != 4 || iip->ihl < 5)
			return -1;
		ports = inner + (iip->ihl & 0xf) * 4;
		p->proto = iip->protocol;
		p->saddr[0] = iip->daddr;
		p->daddr[0] = iip->saddr;
	} else {
		struct ipv6hdr *iip = inner;

		if (ic[0] != 1 && ic[0] != 2 && ic[0] != 3)
			return -1;
		if ((void *)(iip + 1) > end)
			return -1;
		ports = (void *)(iip + 1);
		p->proto = iip->nexthdr;
		__builtin_memcpy(p->saddr, &iip->daddr, 16);
		__builtin_memcpy(p->daddr, &iip->saddr, 16);
	}
	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return -1;
	if ((void *)(ports + 2) > end)
		return -1;
	p->sport = ports[1];
	p->dport = ports[0];
	p->icmp = 1;
	return 0;
}

/* Parse up to the ports. 0 = ours to look at, -1 = pass to the kernel. */
static __always_inline int parse(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *l3 = eth + 1;
	void *l4;
	__be16 proto;

	if (l3 > end)
		return -1;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_hdr *vh = l3;

		if ((void *)(vh + 1) > end)
			return -1;
		proto = vh->proto;
		l3 = vh + 1;
	}
	p->l3off = l3 - data;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;

		if ((void *)(ip + 1) > end)
			return -1;
		if (ip->version != 4 || ip->ihl < 5)
			return -1;
		/* MF set or a non-zero offset: a fragment. */
		if (ip->frag_off & bpf_htons(0x3fff))
			return -1;
		l4 = l3 + (ip->ihl & 0xf) * 4;
		p->family = RVS_AF_INET;
		p->proto = ip->protocol;
		p->l3len = bpf_ntohs(ip->tot_len);
		p->saddr[0] = ip->saddr;
		p->daddr[0] = ip->daddr;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > end)
			return -1;
		if (ip6->version != 6)
			return -1;
		l4 = ip6 + 1;
		p->family = RVS_AF_INET6;
		p->proto = ip6->nexthdr;
		p->l3len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		__builtin_memcpy(p->saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->daddr, &ip6->daddr, 16);
	} else {
		return -1;
	}
	p->l4off = l4 - data;
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > end)
			return -1;
		p->sport = th->source;
		p->dport = th->dest;
		p->tcpflags = ((__u8 *)th)[13];
	} else if (p->proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > end)
			return -1;
		p->sport = uh->source;
		p->dport = uh->dest;
	} else if ((p->family == RVS_AF_INET && p->proto == IPPROTO_ICMP) ||
		   (p->family == RVS_AF_INET6 && p->proto == IPPROTO_ICMPV6)) {
		return parse_icmp_error(p, l4, end);
	} else {
		return -1;
	}
#ifdef RVS_BENCH_VARY_CLIENT
	{
		__u32 zero = 0;
		__u64 *seq = bpf_map_lookup_elem(&bench_seq, &zero);

		if (seq) {
			*seq += 1;
			p->saddr[0] ^= bpf_htonl((__u32)*seq >> 16);
			p->sport ^= bpf_htons((__u16)*seq);
		}
	}
#endif
	return 0;
}

/* ------------------------------------------------------------- flows */

/* Call-site tags. clang may merge calls of one helper from sibling branches
 * into one call taking the map or the callback in a register; the verifier
 * then cannot specialise that call: a map lookup is no longer inlined (the
 * kernel calls the map's lookup through a retpoline, ~+12 ns per packet
 * measured on the flow lookup) and a bpf_loop is no longer inlined (its
 * callback called through a retpoline on every iteration: wlc over 64
 * servers went from ~1150 to ~1750 ns). A one-instruction asm statement,
 * different for every call site, right after the call keeps the branches
 * apart (an empty asm would leave line info without an instruction). */
#define CALL_SITE_TAG(n)                                                           \
	do {                                                                       \
		__u64 tag_;                                                        \
		asm volatile("%0 = " #n : "=r"(tag_));                             \
	} while (0)
#define FLOW_V4_BRANCH() CALL_SITE_TAG(4)
#define FLOW_V6_BRANCH() CALL_SITE_TAG(6)

/* The flow table of the family: flows4 (16-byte key) for IPv4, flows for
 * IPv6. `caddr`/`vaddr` are 16-byte addresses (IPv4 in the first word). */
static __always_inline struct rvs_flow *flow_lookup(__u8 family, const __u32 *caddr,
						    const __u32 *vaddr, __be16 cport,
						    __be16 vport, __u8 proto)
{
	struct rvs_flow *f;

	if (family == RVS_AF_INET) {
		struct rvs_flow4_key k = {};

		__builtin_memcpy(k.caddr, caddr, 4);
		__builtin_memcpy(k.vaddr, vaddr, 4);
		k.cport = cport;
		k.vport = vport;
		k.proto = proto;
		f = bpf_map_lookup_elem(&flows4, &k);
		FLOW_V4_BRANCH();
	} else {
		struct rvs_flow_key k = {};

		__builtin_memcpy(k.caddr, caddr, 16);
		__builtin_memcpy(k.vaddr, vaddr, 16);
		k.cport = cport;
		k.vport = vport;
		k.proto = proto;
		k.family = family;
		f = bpf_map_lookup_elem(&flows, &k);
		FLOW_V6_BRANCH();
	}
	return f;
}

/* Insert or replace the packet's flow; 0 on success. */
static __always_inline long flow_insert(const struct pkt *p, const struct rvs_flow *v)
{
	long rc;

	if (p->family == RVS_AF_INET) {
		struct rvs_flow4_key k = {};

		__builtin_memcpy(k.caddr, p->saddr, 4);
		__builtin_memcpy(k.vaddr, p->daddr, 4);
		k.cport = p->sport;
		k.vport = p->dport;
		k.proto = p->proto;
		rc = bpf_map_update_elem(&flows4, &k, v, BPF_ANY);
		FLOW_V4_BRANCH();
	} else {
		struct rvs_flow_key k = {};

		__builtin_memcpy(k.caddr, p->saddr, 16);
		__builtin_memcpy(k.vaddr, p->daddr, 16);
		k.cport = p->sport;
		k.vport = p->dport;
		k.proto = p->proto;
		k.family = p->family;
		rc = bpf_map_update_elem(&flows, &k, v, BPF_ANY);
		FLOW_V6_BRANCH();
	}
	return rc;
}

/* ------------------------------------------------------- flow cache */

/* The flow cache's hash of an IPv4 flow key (the formula in rvs.h; the
 * Rust side computes the same). A few multiplies: collisions only cost a
 * cache miss. */
static __always_inline __u64 flow_cache_hash(const struct rvs_flow4_key *k)
{
	const __u64 *w = (const __u64 *)k;
	__u64 h = (w[0] ^ RVS_FLOW_CACHE_SEED) * RVS_FLOW_CACHE_MUL;

	h = (h ^ (h >> 32) ^ w[1]) * RVS_FLOW_CACHE_MUL;
	return h ^ (h >> 32);
}

static __always_inline __u32 flow_cache_slot(__u64 h)
{
	return (__u32)h & (RVS_FLOW_CACHE_SIZE - 1);
}

static __always_inline __u32 flow_epoch_slot(__u64 h)
{
	return (__u32)(h >> 16) & (RVS_FLOW_EPOCHS - 1);
}

/* The IPv6 cache's hash of a 40-byte flow key (the formula in rvs.h). */
static __always_inline __u64 flow6_cache_hash(const struct rvs_flow_key *k)
{
	const __u64 *w = (const __u64 *)k;
	__u64 h = (w[0] ^ RVS_FLOW_CACHE_SEED) * RVS_FLOW_CACHE_MUL;

	h = (h ^ (h >> 32) ^ w[1]) * RVS_FLOW_CACHE_MUL;
	h = (h ^ (h >> 32) ^ w[2]) * RVS_FLOW_CACHE_MUL;
	h = (h ^ (h >> 32) ^ w[3]) * RVS_FLOW_CACHE_MUL;
	h = (h ^ (h >> 32) ^ w[4]) * RVS_FLOW_CACHE_MUL;
	return h ^ (h >> 32);
}

static __always_inline __u32 flow6_cache_slot(__u64 h)
{
	return (__u32)h & (RVS_FLOW6_CACHE_SIZE - 1);
}

/* After a write to the packet's flow (insert, state change; IPv4 or IPv6):
 * bump its epoch slot, so every CPU's cache entry of that key (and of the
 * keys that share the slot) is invalid from now on. All CPUs share the
 * slot: atomic. The write comes first (x86: stores stay in order and the
 * locked add is a full barrier), and the cache is filled with the epoch read
 * before its flows4/flows lookup: a fill racing with this write is born
 * invalid. That read relies on x86 keeping loads in order too; a weakly
 * ordered CPU (arm64) would need it to be a load-acquire (BPF has one since
 * Linux 6.15). */
static __always_inline void flow_epoch_bump(const struct pkt *p)
{
	__u32 slot, *e;
	__u64 h;

	if (p->family == RVS_AF_INET) {
		struct rvs_flow4_key k __attribute__((aligned(8))) = {};

		__builtin_memcpy(k.caddr, p->saddr, 4);
		__builtin_memcpy(k.vaddr, p->daddr, 4);
		k.cport = p->sport;
		k.vport = p->dport;
		k.proto = p->proto;
		h = flow_cache_hash(&k);
	} else {
		struct rvs_flow_key k __attribute__((aligned(8))) = {};

		__builtin_memcpy(k.caddr, p->saddr, 16);
		__builtin_memcpy(k.vaddr, p->daddr, 16);
		k.cport = p->sport;
		k.vport = p->dport;
		k.proto = p->proto;
		k.family = p->family;
		h = flow6_cache_hash(&k);
	}
	slot = flow_epoch_slot(h);
	e = bpf_map_lookup_elem(&flow_epochs, &slot);
	CALL_SITE_TAG(20);
	if (e)
		__sync_fetch_and_add(e, 1);
}

/* ------------------------------------------------------------ hashes */

/* The kernel's hash_32 (include/linux/hash.h). */
static __always_inline __u32 hash_32(__u32 v, __u32 bits)
{
	return (v * RVS_GOLDEN_RATIO_32) >> (32 - bits);
}

/* IPVS's address fold: IPv4 host order, IPv6 XOR of the four words. */
static __always_inline __u32 addr_fold(const __u32 *a, __u8 family)
{
	if (family == RVS_AF_INET)
		return bpf_ntohl(a[0]);
	return bpf_ntohl(a[0] ^ a[1] ^ a[2] ^ a[3]);
}

#define ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                   \
	do {                                                                       \
		v0 += v1;                                                          \
		v1 = ROTL64(v1, 13);                                               \
		v1 ^= v0;                                                          \
		v0 = ROTL64(v0, 32);                                               \
		v2 += v3;                                                          \
		v3 = ROTL64(v3, 16);                                               \
		v3 ^= v2;                                                          \
		v0 += v3;                                                          \
		v3 = ROTL64(v3, 21);                                               \
		v3 ^= v0;                                                          \
		v2 += v1;                                                          \
		v1 = ROTL64(v1, 17);                                               \
		v1 ^= v2;                                                          \
		v2 = ROTL64(v2, 32);                                               \
	} while (0)

/* SipHash-1-3 of the 4 little-endian bytes of v with key (k, k), truncated
 * to 32 bits: the 64-bit kernel's hsiphash(&v, 4, {k, k}) used by ip_vs_mh. */
static __always_inline __u32 hsiphash_u32(__u64 k, __u32 v)
{
	__u64 v0 = k ^ 0x736f6d6570736575ULL;
	__u64 v1 = k ^ 0x646f72616e646f6dULL;
	__u64 v2 = k ^ 0x6c7967656e657261ULL;
	__u64 v3 = k ^ 0x7465646279746573ULL;
	__u64 b = ((__u64)4 << 56) | v;

	v3 ^= b;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return (__u32)(v0 ^ v1 ^ v2 ^ v3);
}

/* ----------------------------------------------------------- scheduling */

static __always_inline struct rvs_dest *eligible(__u32 idx)
{
	struct rvs_dest *d;

	if (idx == RVS_SLOT_EMPTY)
		return NULL;
	d = bpf_map_lookup_elem(&dests, &idx);
	if (!d || d->weight == 0 ||
	    (d->flags & (RVS_DEST_F_UNAVAILABLE | RVS_DEST_F_OVERLOADED)))
		return NULL;
	return d;
}

static __always_inline __u32 slot_at(__u32 pos)
{
	__u32 *v = bpf_map_lookup_elem(&slots, &pos);

	return v ? *v : RVS_SLOT_EMPTY;
}

/* rr over the real-server list, wrr over its precomputed sequence: a shared
 * cursor advanced atomically; ineligible entries are stepped over. */
struct walk {
	__u64 start;
	__u32 off;
	__u32 len;
	__u32 result;
	__u32 pad;
};

static long walk_step(__u32 i, void *ctx)
{
	struct walk *x = ctx;
	__u32 idx;

	if (x->len == 0)
		return 1;
	idx = slot_at(x->off + (__u32)((x->start + i) % x->len));
	if (eligible(idx)) {
		x->result = idx;
		return 1;
	}
	return 0;
}

static __always_inline __u32 sched_cursor(__u32 svc_idx, __u32 off, __u32 len)
{
	__u64 *cur = bpf_map_lookup_elem(&rr_cursor, &svc_idx);
	struct walk x = { .off = off, .len = len, .result = RVS_SLOT_EMPTY };
	__u32 idx;

	if (!cur || len == 0)
		return RVS_SLOT_EMPTY;
	x.start = __sync_fetch_and_add(cur, 1);
	/* The common case: the first candidate is eligible. */
	idx = slot_at(off + (__u32)(x.start % len));
	if (eligible(idx))
		return idx;
	bpf_loop(len < RVS_MAX_SVC_DESTS ? len : RVS_MAX_SVC_DESTS, walk_step, &x, 0);
	CALL_SITE_TAG(10);
	return x.result;
}

/* sh-fallback: bucket (roff + ihash) & 255 for roff = off + ihash. */
struct sh_fallback {
	__u32 table_off;
	__u32 ihash;
	__u32 result;
	__u32 pad;
};

static long sh_fallback_step(__u32 off, void *ctx)
{
	struct sh_fallback *x = ctx;
	__u32 roff = (off + x->ihash) & 0xff;
	__u32 idx = slot_at(x->table_off + ((roff + x->ihash) & 0xff));

	if (idx == RVS_SLOT_EMPTY)
		return 1;
	if (eligible(idx)) {
		x->result = idx;
		return 1;
	}
	return 0;
}

struct mh_fallback {
	__u32 fold_port; /* ntohs(port) + fold */
	__u32 ihash;
	__u32 m;
	__u32 table_off;
	__u32 result;
};

static long mh_fallback_step(__u32 off, void *c)
{
	struct mh_fallback *x = c;
	__u32 roff, idx;

	if (x->m == 0)
		return 1;
	roff = (off + x->ihash) % x->m;
	idx = slot_at(x->table_off +
		      hsiphash_u32(RVS_MH_HASH1_KEY, roff + x->fold_port) % x->m);
	if (idx == RVS_SLOT_EMPTY)
		return 1;
	if (eligible(idx)) {
		x->result = idx;
		return 1;
	}
	return 0;
}

/* lc, wlc, sed, nq, fo, ovf: one pass over the real-server list with the kernel's
 * comparisons (ties to the earliest server). Products are u64: exact while
 * active*256+inactive < 2^40 and weights < 2^24. The walk runs in bpf_loop
 * so the verifier checks the body once, not once per server. */
struct least {
	__u32 off;
	__u8 sched;
	__u8 pad[3];
	__u32 best;
	__u64 best_cost;
	__u64 best_w;
};

static long least_step(__u32 i, void *ctx)
{
	struct least *x = ctx;
	struct rvs_dest_conns *c;
	struct rvs_dest *d;
	__u64 a = 0, in = 0, cost, w;
	__u32 idx = slot_at(x->off + i);

	d = eligible(idx);
	if (!d)
		return 0;
	c = bpf_map_lookup_elem(&dest_conns, &idx);
	if (c) {
		a = c->active;
		in = c->inactive;
	}
	w = d->weight;
	if (x->sched == RVS_SCHED_FO || x->sched == RVS_SCHED_OVF) {
		/* Highest weight wins, ties to the earliest; ovf only takes
		 * servers whose active connections do not exceed their weight. */
		if (x->sched == RVS_SCHED_OVF && a > w)
			return 0;
		if (x->best == RVS_SLOT_EMPTY || w > x->best_w) {
			x->best = idx;
			x->best_w = w;
		}
		return 0;
	}
	if (x->sched == RVS_SCHED_LC) {
		cost = (a << 8) + in;
		if (x->best == RVS_SLOT_EMPTY || cost < x->best_cost) {
			x->best = idx;
			x->best_cost = cost;
		}
		return 0;
	}
	if (x->sched == RVS_SCHED_NQ && a == 0) {
		x->best = idx;
		return 1;
	}
	if (x->sched == RVS_SCHED_WLC)
		cost = (a << 8) + in;
	else /* sed, nq */
		cost = a + 1;
	if (x->best == RVS_SLOT_EMPTY || x->best_cost * w > cost * x->best_w) {
		x->best = idx;
		x->best_cost = cost;
		x->best_w = w;
	}
	return 0;
}

static __always_inline __u32 sched_least(const struct rvs_svc *s)
{
	struct least x = {
		.off = s->dests_off,
		.sched = s->sched,
		.best = RVS_SLOT_EMPTY,
	};

	if (s->dests_len > RVS_MAX_SVC_DESTS)
		return RVS_SLOT_EMPTY;
	bpf_loop(s->dests_len, least_step, &x, 0);
	CALL_SITE_TAG(11);
	return x.best;
}

/* ------------------------------------------- twos, lblc, lblcr (counters) */

/* twos, lblc and lblcr are global functions: the verifier checks each once
 * on its own (arguments may be NULL, hence the checks) instead of once per
 * call site and caller state, and their stack frames are their own (the
 * main program's is most of the 512 bytes). */

/* The connection overhead of dest `idx` (IPVS: active * 256 + inactive). */
static __always_inline __u64 dest_overhead(__u32 idx)
{
	struct rvs_dest_conns *c = bpf_map_lookup_elem(&dest_conns, &idx);

	if (!c)
		return 0;
	return ((__u64)c->active << 8) + c->inactive;
}

/* twos (ip_vs_twos.c): two draws r = rand % (total + 1) over the eligible
 * weights; each picks the first eligible server whose prefix sum of
 * eligible weights reaches max(r, 1). The second pick wins only when it is
 * strictly less loaded per weight. Two passes: the total, then the picks. */
struct twos {
	__u32 off;
	__u32 c1;
	__u32 c2;
	__u32 pad;
	__u64 total;
	__u64 t1;
	__u64 t2;
};

static long twos_total_step(__u32 i, void *ctx)
{
	struct twos *x = ctx;
	struct rvs_dest *d = eligible(slot_at(x->off + i));

	if (d)
		x->total += d->weight;
	return 0;
}

static long twos_pick_step(__u32 i, void *ctx)
{
	struct twos *x = ctx;
	__u32 idx = slot_at(x->off + i);
	struct rvs_dest *d = eligible(idx);

	if (!d)
		return 0;
	x->total += d->weight; /* now the running prefix sum */
	if (x->c1 == RVS_SLOT_EMPTY && x->total >= x->t1)
		x->c1 = idx;
	if (x->c2 == RVS_SLOT_EMPTY && x->total >= x->t2)
		x->c2 = idx;
	return x->c1 != RVS_SLOT_EMPTY && x->c2 != RVS_SLOT_EMPTY;
}

__noinline __u32 sched_twos(const struct rvs_svc *s)
{
	struct twos x = { .c1 = RVS_SLOT_EMPTY, .c2 = RVS_SLOT_EMPTY };
	struct rvs_dest *d1, *d2;
	__u64 r1, r2, w1, w2;

	if (!s || s->dests_len > RVS_MAX_SVC_DESTS)
		return RVS_SLOT_EMPTY;
	x.off = s->dests_off;
	bpf_loop(s->dests_len, twos_total_step, &x, 0);
	if (x.total == 0)
		return RVS_SLOT_EMPTY;
	r1 = bpf_get_prandom_u32() % (x.total + 1);
	r2 = bpf_get_prandom_u32() % (x.total + 1);
	x.t1 = r1 ? r1 : 1;
	x.t2 = r2 ? r2 : 1;
	x.total = 0;
	bpf_loop(s->dests_len, twos_pick_step, &x, 0);
	d1 = bpf_map_lookup_elem(&dests, &x.c1);
	d2 = bpf_map_lookup_elem(&dests, &x.c2);
	if (!d1 || !d2)
		return x.c1;
	w1 = d1->weight;
	w2 = d2->weight;
	return w2 * dest_overhead(x.c1) > w1 * dest_overhead(x.c2) ? x.c2 : x.c1;
}

static long locality_step(__u32 i, void *ctx)
{
	struct locality_pass *x;
	struct locality_scratch *sc;
	struct rvs_dest_conns *c;
	struct rvs_dest *d;
	__u64 a = 0, in = 0, cost, w;
	__u32 zero = 0, idx;
	int j;

	sc = bpf_map_lookup_elem(&locality_tmp, &zero);
	if (!sc)
		return 1;
	x = &sc->x;
	idx = slot_at(x->off + i);
	if (idx == RVS_SLOT_EMPTY)
		return 0;
	d = bpf_map_lookup_elem(&dests, &idx);
	if (!d)
		return 0;
	c = bpf_map_lookup_elem(&dest_conns, &idx);
	if (c) {
		a = c->active;
		in = c->inactive;
	}
	w = d->weight;
	if (a * 2 < w)
		x->half = 1;
#pragma unroll
	for (j = 0; j < RVS_LBLCR_SET_MAX; j++)
		if (j < x->count && sc->members[j] == idx)
			sc->found[j] = 1;
	if (w == 0 || (d->flags & (RVS_DEST_F_UNAVAILABLE | RVS_DEST_F_OVERLOADED)))
		return 0;
	cost = (a << 8) + in;
	if (x->best == RVS_SLOT_EMPTY || x->best_cost * w > cost * x->best_w) {
		x->best = idx;
		x->best_cost = cost;
		x->best_w = w;
	}
	return 0;
}

/* The kernel's is_overloaded (lblc's own sense): more active connections
 * than weight while some server of the service is less than half loaded. */
static __always_inline int locality_overloaded(__u32 idx, const struct rvs_dest *d, __u8 half)
{
	struct rvs_dest_conns *c = bpf_map_lookup_elem(&dest_conns, &idx);

	return c && c->active > d->weight && half;
}

/* The live locality entry of the packet's destination address, NULL when
 * absent or unused for the expiration time (the kernel's full check
 * deletes such entries every half hour; here they are gone at once). */
static __always_inline struct rvs_locality *
locality_entry(struct rvs_locality_key *k, __u32 svc_idx, const struct pkt *p,
	       const struct rvs_config *cfg, __u64 now)
{
	struct rvs_locality *e;

	k->svc = svc_idx;
	k->family = p->family;
	__builtin_memcpy(k->daddr, p->daddr, 16);
	e = bpf_map_lookup_elem(&locality, k);
	if (e && cfg->locality_expiration &&
	    now - e->lastuse >= (__u64)cfg->locality_expiration * cfg->hz)
		return NULL;
	return e;
}

/* lblc (ip_vs_lblc.c): the cached server unless it is not eligible or
 * overloaded in lblc's sense; then, and on a miss, WLC over the service,
 * and the entry names that server. */
__noinline __u32 sched_lblc(const struct rvs_svc *s, __u32 svc_idx,
					const struct pkt *p)
{
	struct locality_scratch *sc;
	struct rvs_locality *e;
	struct rvs_config *cfg;
	struct rvs_dest *d;
	__u32 zero = 0, m;
	__u64 now = bpf_jiffies64();

	if (!s || !p)
		return RVS_SLOT_EMPTY;
	cfg = bpf_map_lookup_elem(&config, &zero);
	sc = bpf_map_lookup_elem(&locality_tmp, &zero);
	if (!cfg || !sc || s->dests_len > RVS_MAX_SVC_DESTS)
		return RVS_SLOT_EMPTY;
	__builtin_memset(sc, 0, sizeof(*sc));
	sc->x.off = s->dests_off;
	sc->x.best = RVS_SLOT_EMPTY;
	e = locality_entry(&sc->k, svc_idx, p, cfg, now);
	if (e) {
		sc->x.count = 1;
		sc->members[0] = e->members[0];
	}
	bpf_loop(s->dests_len, locality_step, NULL, 0);
	if (e) {
		e->lastuse = now;
		m = sc->members[0];
		d = eligible(m);
		if (sc->found[0] && d && !locality_overloaded(m, d, sc->x.half))
			return m;
	}
	if (sc->x.best == RVS_SLOT_EMPTY)
		return RVS_SLOT_EMPTY;
	sc->ne.lastuse = now;
	sc->ne.lastmod = now;
	sc->ne.count = 1;
	sc->ne.members[0] = sc->x.best;
	bpf_map_update_elem(&locality, &sc->k, &sc->ne, BPF_ANY);
	return sc->x.best;
}

/* lblcr (ip_vs_lblcr.c): the WLC minimum of the set's eligible members
 * (set order, ties to the newest); a set unchanged for the expiration time
 * with more than one member first sheds its most loaded member (weight >
 * 0); if the minimum is missing or overloaded in lblc's sense, WLC over the
 * service picks a server, which joins the set at its head. A miss creates
 * the set with the WLC choice. Concurrent CPUs update a set in place
 * without a lock: a torn set is still a list of dest indexes, each checked
 * for membership before use. */
__noinline __u32 sched_lblcr(const struct rvs_svc *s, __u32 svc_idx,
					 const struct pkt *p)
{
	struct locality_scratch *sc;
	struct rvs_locality *e;
	struct rvs_config *cfg;
	struct rvs_dest *d;
	__u32 zero = 0, least = RVS_SLOT_EMPTY, most = RVS_LBLCR_SET_MAX, n;
	__u64 now = bpf_jiffies64(), lo = 0, lw = 0, mo = 0, mw = 0, o, w;
	int j, present = 0;

	if (!s || !p)
		return RVS_SLOT_EMPTY;
	cfg = bpf_map_lookup_elem(&config, &zero);
	sc = bpf_map_lookup_elem(&locality_tmp, &zero);
	if (!cfg || !sc || s->dests_len > RVS_MAX_SVC_DESTS)
		return RVS_SLOT_EMPTY;
	__builtin_memset(sc, 0, sizeof(*sc));
	sc->x.off = s->dests_off;
	sc->x.best = RVS_SLOT_EMPTY;
	e = locality_entry(&sc->k, svc_idx, p, cfg, now);
	if (e) {
		sc->x.count = e->count < RVS_LBLCR_SET_MAX ? e->count : RVS_LBLCR_SET_MAX;
		__builtin_memcpy(sc->members, e->members, sizeof(sc->members));
	}
	bpf_loop(s->dests_len, locality_step, NULL, 0);
	if (!e) {
		if (sc->x.best == RVS_SLOT_EMPTY)
			return RVS_SLOT_EMPTY;
		sc->ne.lastuse = now;
		sc->ne.lastmod = now;
		sc->ne.count = 1;
		sc->ne.members[0] = sc->x.best;
		bpf_map_update_elem(&locality, &sc->k, &sc->ne, BPF_ANY);
		return sc->x.best;
	}
	e->lastuse = now;
	/* Minimum over eligible members, maximum over members of weight > 0
	 * (ip_vs_dest_set_min / _max), both in set order. */
#pragma unroll
	for (j = 0; j < RVS_LBLCR_SET_MAX; j++) {
		__u32 m = sc->members[j];

		if (!sc->found[j])
			continue;
		d = bpf_map_lookup_elem(&dests, &m);
		if (!d || d->weight == 0)
			continue;
		o = dest_overhead(m);
		w = d->weight;
		if (most == RVS_LBLCR_SET_MAX || mo * w < o * mw) {
			most = j;
			mo = o;
			mw = w;
		}
		if (d->flags & (RVS_DEST_F_UNAVAILABLE | RVS_DEST_F_OVERLOADED))
			continue;
		if (least == RVS_SLOT_EMPTY || lo * w > o * lw) {
			least = m;
			lo = o;
			lw = w;
		}
	}
	n = sc->x.count;
	if (n > 1 && most < RVS_LBLCR_SET_MAX && cfg->locality_expiration &&
	    now - e->lastmod > (__u64)cfg->locality_expiration * cfg->hz) {
		/* Shift the members after `most` down by one. */
#pragma unroll
		for (j = 0; j < RVS_LBLCR_SET_MAX - 1; j++)
			if (j >= most)
				e->members[j] = e->members[j + 1];
		e->count = n - 1;
		e->lastmod = now;
	}
	if (least != RVS_SLOT_EMPTY) {
		d = bpf_map_lookup_elem(&dests, &least);
		if (d && !locality_overloaded(least, d, sc->x.half))
			return least;
	}
	if (sc->x.best == RVS_SLOT_EMPTY)
		return RVS_SLOT_EMPTY;
	n = e->count < RVS_LBLCR_SET_MAX ? e->count : RVS_LBLCR_SET_MAX;
#pragma unroll
	for (j = 0; j < RVS_LBLCR_SET_MAX; j++)
		if (j < n && e->members[j] == sc->x.best)
			present = 1;
	if (!present) {
#pragma unroll
		for (j = RVS_LBLCR_SET_MAX - 1; j > 0; j--)
			e->members[j] = e->members[j - 1];
		e->members[0] = sc->x.best;
		e->count = n < RVS_LBLCR_SET_MAX ? n + 1 : RVS_LBLCR_SET_MAX;
		e->lastmod = now;
	}
	return sc->x.best;
}

/* The real-server index for a new flow, RVS_SLOT_EMPTY for none. */
static __always_inline __u32 schedule(const struct rvs_svc *s, __u32 svc_idx,
				      const struct pkt *p)
{
	__u32 idx, fold, port, ihash;

	switch (s->sched) {
	case RVS_SCHED_RR:
		return sched_cursor(svc_idx, s->dests_off, s->dests_len);
	case RVS_SCHED_WRR:
		return sched_cursor(svc_idx, s->table_off, s->table_len);
	case RVS_SCHED_LC:
	case RVS_SCHED_WLC:
	case RVS_SCHED_SED:
	case RVS_SCHED_NQ:
	case RVS_SCHED_FO:
	case RVS_SCHED_OVF:
		return sched_least(s);
	case RVS_SCHED_DH:
		if (s->table_len != (1u << RVS_DH_TAB_BITS))
			return RVS_SLOT_EMPTY;
		idx = slot_at(s->table_off +
			      hash_32(addr_fold(p->daddr, p->family), RVS_DH_TAB_BITS));
		return eligible(idx) ? idx : RVS_SLOT_EMPTY;
	case RVS_SCHED_SH:
		if (s->table_len != (1u << RVS_SH_TAB_BITS))
			return RVS_SLOT_EMPTY;
		fold = addr_fold(p->saddr, p->family);
		port = (s->flags & RVS_SVC_F_SCHED2) ? bpf_ntohs(p->sport) : 0;
		ihash = hash_32(port + fold, RVS_SH_TAB_BITS);
		idx = slot_at(s->table_off + ihash);
		if (idx == RVS_SLOT_EMPTY || eligible(idx) ||
		    !(s->flags & RVS_SVC_F_SCHED1))
			return eligible(idx) ? idx : RVS_SLOT_EMPTY;
		{
			struct sh_fallback x = {
				.table_off = s->table_off,
				.ihash = ihash,
				.result = RVS_SLOT_EMPTY,
			};

			bpf_loop(1u << RVS_SH_TAB_BITS, sh_fallback_step, &x, 0);
			CALL_SITE_TAG(12);
			return x.result;
		}
	case RVS_SCHED_MH: {
		struct mh_fallback x;

		if (s->table_len == 0)
			return RVS_SLOT_EMPTY;
		fold = addr_fold(p->saddr, p->family);
		port = (s->flags & RVS_SVC_F_SCHED2) ? bpf_ntohs(p->sport) : 0;
		ihash = hsiphash_u32(RVS_MH_HASH1_KEY, port + fold) % s->table_len;
		idx = slot_at(s->table_off + ihash);
		if (idx == RVS_SLOT_EMPTY || eligible(idx) ||
		    !(s->flags & RVS_SVC_F_SCHED1))
			return eligible(idx) ? idx : RVS_SLOT_EMPTY;
		x.fold_port = port + fold;
		x.ihash = ihash;
		x.m = s->table_len;
		x.table_off = s->table_off;
		x.result = RVS_SLOT_EMPTY;
		bpf_loop(s->table_len, mh_fallback_step, &x, 0);
		CALL_SITE_TAG(13);
		return x.result;
	}
	case RVS_SCHED_TWOS:
		return sched_twos(s);
	case RVS_SCHED_LBLC:
		return sched_lblc(s, svc_idx, p);
	case RVS_SCHED_LBLCR:
		return sched_lblcr(s, svc_idx, p);
	default:
		return RVS_SLOT_EMPTY;
	}
}

/* Persistence (ip_vs_sched_persist): a live template of the client's
 * network (and the service's port: 0 for a port-zero service) names the
 * real server, unless that server was deleted (a
 * quiesced one keeps its clients, as with expire_quiescent_template = 0);
 * otherwise the scheduler chooses and a template is written. Templates are
 * refreshed by every new flow that uses them. */
static __always_inline __u32 schedule_persistent(const struct rvs_svc *s, __u32 svc_idx,
						 const struct pkt *p, __be16 svc_port,
						 const struct rvs_config *cfg, __u64 now)
{
	struct rvs_persist_key pk = {};
	struct rvs_persist nt = {};
	struct rvs_persist *t;
	__u32 mask[4], c[4], idx;
	int i;

	__builtin_memcpy(mask, s->persist_mask, 16);
#pragma unroll
	for (i = 0; i < 4; i++)
		c[i] = p->saddr[i] & mask[i];
	__builtin_memcpy(pk.caddr, c, 16);
	__builtin_memcpy(pk.vaddr, p->daddr, 16);
	/* A port-zero service's template covers all ports of the VIP (IPVS's
	 * <caddr, 0, vaddr, 0> template): the service's port, not the packet's. */
	pk.vport = svc_port;
	pk.proto = p->proto;
	pk.family = p->family;
	t = bpf_map_lookup_elem(&persist, &pk);
	if (t && t->svc == svc_idx && now - t->last_seen <= (__u64)s->persist_timeout * cfg->hz) {
		__u32 didx = t->dest;
		struct rvs_dest *d = bpf_map_lookup_elem(&dests, &didx);

		if (d && !(d->flags & RVS_DEST_F_UNAVAILABLE)) {
			t->last_seen = now;
			return didx;
		}
	}
	idx = schedule(s, svc_idx, p);
	if (idx == RVS_SLOT_EMPTY)
		return idx;
	nt.last_seen = now;
	nt.dest = idx;
	nt.svc = svc_idx;
	bpf_map_update_elem(&persist, &pk, &nt, BPF_ANY);
	return idx;
}

/* ------------------------------------------------------ TCP state machine */

#define sNO RVS_TCP_S_NONE
#define sES RVS_TCP_S_ESTABLISHED
#define sSS RVS_TCP_S_SYN_SENT
#define sSR RVS_TCP_S_SYN_RECV
#define sFW RVS_TCP_S_FIN_WAIT
#define sTW RVS_TCP_S_TIME_WAIT
#define sCL RVS_TCP_S_CLOSE
#define sCW RVS_TCP_S_CLOSE_WAIT
#define sLA RVS_TCP_S_LAST_ACK
#define sLI RVS_TCP_S_LISTEN
#define sSA RVS_TCP_S_SYNACK

/* [direction][flag row][state]: direction 0 = INPUT (NAT, a reply was seen),
 * 1 = OUTPUT (NAT replies), 2 = INPUT_ONLY (DR/TUN, NAT before a reply);
 * rows syn, fin, ack, rst. The tables of IPVS's ip_vs_proto_tcp.c. */
static const __u8 tcp_states[3][4][RVS_TCP_S_LAST] = {
	{
		/*        NO   ES   SS   SR   FW   TW   CL   CW   LA   LI   SA */
		/*syn*/ { sSR, sES, sES, sSR, sSR, sSR, sSR, sSR, sSR, sSR, sSR },
		/*fin*/ { sCL, sCW, sSS, sTW, sTW, sTW, sCL, sCW, sLA, sLI, sTW },
		/*ack*/ { sES, sES, sSS, sES, sFW, sTW, sCL, sCW, sCL, sLI, sES },
		/*rst*/ { sCL, sCL, sCL, sSR, sCL, sCL, sCL, sCL, sLA, sLI, sSR },
	},
	{
		/*syn*/ { sSS, sES, sSS, sSR, sSS, sSS, sSS, sSS, sSS, sLI, sSR },
		/*fin*/ { sTW, sFW, sSS, sTW, sFW, sTW, sCL, sTW, sLA, sLI, sTW },
		/*ack*/ { sES, sES, sSS, sES, sFW, sTW, sCL, sCW, sLA, sES, sES },
		/*rst*/ { sCL, sCL, sSS, sCL, sCL, sTW, sCL, sCL, sCL, sCL, sCL },
	},
	{
		/*syn*/ { sSR, sES, sES, sSR, sSR, sSR, sSR, sSR, sSR, sSR, sSR },
		/*fin*/ { sCL, sFW, sSS, sTW, sFW, sTW, sCL, sCW, sLA, sLI, sTW },
		/*ack*/ { sES, sES, sSS, sES, sFW, sTW, sCL, sCW, sCL, sLI, sES },
		/*rst*/ { sCL, sCL, sCL, sSR, sCL, sCL, sCL, sCL, sLA, sLI, sCL },
	},
};

#define DIR_INPUT 0
#define DIR_OUTPUT 1
#define DIR_INPUT_ONLY 2

/* IPVS's set_tcp_state: RST first, then SYN, FIN, ACK; none of them = CLOSE. */
static __always_inline __u8 tcp_next_state(__u8 state, __u8 flags, __u32 dir)
{
	__u32 row;

	if (flags & TCPF_RST)
		row = 3;
	else if (flags & TCPF_SYN)
		row = 0;
	else if (flags & TCPF_FIN)
		row = 1;
	else if (flags & TCPF_ACK)
		row = 2;
	else
		return RVS_TCP_S_CLOSE;
	if (state >= RVS_TCP_S_LAST || dir > 2)
		return RVS_TCP_S_CLOSE;
	return tcp_states[dir][row][state];
}

/* IPVS's tcp_state_active_table: which states count as ActiveConn. */
static __always_inline int state_active(__u8 proto, __u8 state)
{
	return proto == IPPROTO_TCP &&
	       (state == RVS_TCP_S_ESTABLISHED || state == RVS_TCP_S_SYN_SENT ||
		state == RVS_TCP_S_SYN_RECV || state == RVS_TCP_S_SYNACK);
}

/* Add `delta` (+1/-1) to dest `idx`'s active or inactive counter. */
static __always_inline void conns_add(__u32 idx, int active, int delta)
{
	struct rvs_dest_conns *c = bpf_map_lookup_elem(&dest_conns, &idx);

	if (!c)
		return;
	if (active)
		__sync_fetch_and_add(&c->active, delta);
	else
		__sync_fetch_and_add(&c->inactive, delta);
}

/* A flow of dest `idx` went from state `from` to `to`. */
static __always_inline void conns_move(__u32 idx, __u8 proto, __u8 from, __u8 to)
{
	int a = state_active(proto, from), b = state_active(proto, to);

	if (a != b) {
		conns_add(idx, a, -1);
		conns_add(idx, b, 1);
	}
}

/* The flow's timeout in jiffies. */
static __always_inline __u64 flow_timeout(const struct rvs_config *cfg, const struct rvs_flow *f,
					  __u8 proto)
{
	__u32 s = f->state;

	if (proto != IPPROTO_TCP)
		return (__u64)cfg->udp_timeout * cfg->hz;
	if (s >= RVS_TCP_S_LAST)
		return 0;
	return (__u64)cfg->tcp_timeouts[s] * cfg->hz;
}

/* Count a new flow on this CPU; true when this second's count is above the
 * configured limit (a SYN flood: stop paying for flow-table inserts). */
static __always_inline int flood_over(const struct rvs_config *cfg, __u64 now)
{
	__u32 zero = 0;
	struct rvs_flood *st;
	__u64 sec;

	if (!cfg->max_new_flows || !cfg->hz)
		return 0;
	st = bpf_map_lookup_elem(&flood, &zero);
	if (!st)
		return 0;
	sec = now / cfg->hz;
	if (st->second != sec) {
		st->second = sec;
		st->count = 0;
	}
	st->count++;
	return st->count > cfg->max_new_flows;
}

/* ---------------------------------------------------------------- stats */

static __always_inline void count(void *map, __u32 idx, __u32 bytes, int out, int conn)
{
	struct rvs_stats *st = bpf_map_lookup_elem(map, &idx);

	if (!st)
		return;
	if (out) {
		st->outpkts++;
		st->outbytes += bytes;
	} else {
		st->inpkts++;
		st->inbytes += bytes;
	}
	st->conns += conn;
}

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

/* ---------------------------------------------------------- forwarding */

/* Copy a MAC address as three 16-bit words: a memcpy into the packed
 * struct ethhdr compiles to six byte loads and six byte stores. (Packet and
 * map value accesses need no alignment on the architectures the kernel
 * lets XDP do unaligned access on, x86-64 and arm64 among them.) */
static __always_inline void mac_copy(void *dst, const void *src)
{
	__u16 *d = dst;
	const __u16 *s = src;

	d[0] = s[0];
	d[1] = s[1];
	d[2] = s[2];
}

/* Send the (rewritten) frame out: XDP_TX on the ingress interface (source
 * MAC = the MAC the frame was sent to, i.e. ours), else redirect. */
static __always_inline int l2_out(struct xdp_md *ctx, const __u8 *dmac, const __u8 *smac,
				  __u32 ifindex)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	if (ifindex == 0 || ifindex == ctx->ingress_ifindex) {
		mac_copy(eth->h_source, eth->h_dest);
		mac_copy(eth->h_dest, dmac);
		return XDP_TX;
	}
	mac_copy(eth->h_source, smac);
	mac_copy(eth->h_dest, dmac);
	return bpf_redirect(ifindex, 0);
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

/* Encapsulate: IPIP (udp = 0) or GUE (udp = 1) in the family of the packet
 * (IPv4 in IPv4, IPv6 in IPv6), then send to the real server / next hop. */
static __always_inline int encap(struct xdp_md *ctx, const struct pkt *p,
				 const struct rvs_dest *d, const struct rvs_config *cfg, int udp)
{
	__u8 l2[18];
	__u32 l2len = p->l3off;
	__u32 outer_ip = p->family == RVS_AF_INET ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	__u32 hdrs = outer_ip + (udp ? sizeof(struct udphdr) + RVS_GUE_HDR_LEN : 0);
	__u16 inner_len = p->l3len;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	void *ip;

	if (d->family != p->family)
		return XDP_DROP;
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
		h.protocol = udp ? IPPROTO_UDP : IPPROTO_IPIP;
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
		oh->nexthdr = udp ? IPPROTO_UDP : IPPROTO_IPV6;
		oh->hop_limit = RVS_TUN_TTL;
		__builtin_memcpy(&oh->saddr, cfg->tun_src6, 16);
		oh->saddr.in6_u.u6_addr32[3] =
			tun_source_word(oh->saddr.in6_u.u6_addr32[3], cfg->tun_vary6, p);
		__builtin_memcpy(&oh->daddr, d->addr, 16);
	}
	if (udp) {
		struct udphdr *uh = ip + outer_ip;
		__u8 *gue = (void *)(uh + 1);

		if ((void *)(gue + RVS_GUE_HDR_LEN) > end)
			return XDP_DROP;
		uh->source = flow_sport(p);
		uh->dest = d->gue_port;
		uh->len = bpf_htons(inner_len + sizeof(struct udphdr) + RVS_GUE_HDR_LEN);
		/* Zero checksum: allowed for IPv4, and for IPv6 tunnels by RFC 6935;
		 * rvs's own decapsulator accepts it. */
		uh->check = 0;
		gue[0] = 0; /* version 0, C = 0, no optional fields */
		gue[1] = p->family == RVS_AF_INET ? IPPROTO_IPIP : IPPROTO_IPV6;
		gue[2] = 0;
		gue[3] = 0;
	}
	return l2_out(ctx, d->mac, d->smac, d->ifindex);
}

/* Route a NAT-rewritten packet with the kernel's FIB; the kernel forwards it
 * itself (XDP_PASS) when the neighbour is not resolved yet. */
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
		return encap(ctx, p, d, cfg, 0);
	case RVS_FWD_TUN_GUE:
		return encap(ctx, p, d, cfg, 1);
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

/* ------------------------------------------------------- NAT reply path */

static __always_inline int nat_reply(struct xdp_md *ctx, const struct pkt *p,
				     const struct rvs_config *cfg)
{
	struct rvs_nat_key nk = {};
	struct rvs_nat *n;
	struct rvs_flow *f;

	if (!(cfg->flags & RVS_CFG_F_NAT))
		return XDP_PASS;
	__builtin_memcpy(nk.raddr, p->saddr, 16);
	__builtin_memcpy(nk.caddr, p->daddr, 16);
	nk.rport = p->sport;
	nk.cport = p->dport;
	nk.proto = p->proto;
	nk.family = p->family;
	n = bpf_map_lookup_elem(&nat_rev, &nk);
	if (!n)
		return XDP_PASS;

	f = flow_lookup(p->family, p->daddr, (const __u32 *)n->vaddr, p->dport, n->vport,
			p->proto);
	if (f) {
		f->last_seen = bpf_jiffies64();
		if (p->proto == IPPROTO_TCP) {
			__u8 old = f->state;

			f->state = tcp_next_state(old, p->tcpflags, DIR_OUTPUT);
			conns_move(f->dest, p->proto, old, f->state);
		}
		f->flags &= ~RVS_FLOW_F_NOOUTPUT;
	}
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
	__u16 *icheck, *l4check = NULL, *ports;
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
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = data + il4;

		if ((void *)(th + 1) <= end)
			l4check = &th->check;
	} else {
		struct udphdr *uh = data + il4;

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
	struct rvs_nat_key nk = {};
	struct rvs_nat *n;
	__u32 vaddr[4];

	if (!(cfg->flags & RVS_CFG_F_NAT))
		return XDP_PASS;
	/* The quote describes (real server, client) as a reply would. */
	__builtin_memcpy(nk.raddr, p->saddr, 16);
	__builtin_memcpy(nk.caddr, p->daddr, 16);
	nk.rport = p->sport;
	nk.cport = p->dport;
	nk.proto = p->proto;
	nk.family = p->family;
	n = bpf_map_lookup_elem(&nat_rev, &nk);
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
 * anything else is the kernel's. */
static __always_inline int icmp_error(struct xdp_md *ctx, const struct pkt *p,
				      const struct rvs_config *cfg)
{
	struct rvs_dest *d;
	struct rvs_flow *f;
	__u32 didx;

	f = flow_lookup(p->family, p->saddr, p->daddr, p->sport, p->dport, p->proto);
	if (!f)
		return icmp_nat_out(ctx, p, cfg);
	didx = f->dest;
	d = bpf_map_lookup_elem(&dests, &didx);
	if (!d || (d->flags & RVS_DEST_F_UNAVAILABLE))
		return XDP_PASS;
	if (d->method == RVS_FWD_NAT)
		return icmp_nat_in(ctx, p, f, d);
	count(&svc_stats, f->svc, p->l3len, 0, 0);
	count(&dest_stats, didx, p->l3len, 0, 0);
	return forward(ctx, p, d, cfg);
}

/* -------------------------------------------------- established fast path */

/* fast_established's IPv6 counterpart (the same checks, counters,
 * last_seen stamping and MAC rewrite): an untagged IPv6 frame whose next
 * header is TCP (ACK, none of SYN/FIN/RST) or UDP directly, of a live flow
 * in `flows` to an available DR real server, served from this CPU's
 * flow6_cache or else from `flows` (the cache entry then refilled).
 * Anything else returns -1 for the general path, with the `flows` lookup's
 * result in *found when *looked is set. Inlined like fast_established: the
 * main program's frame grows from 328 to 344 bytes (deepest call chain,
 * with sched_lblcr and its bpf_loop callback, well below 512), and a hit
 * costs ~8 ns less than through a BPF-to-BPF call (xdp_bench: 36 against
 * 44 ns per packet). */
static __always_inline int fast_established6(struct xdp_md *ctx, struct rvs_flow **found, int *looked)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	struct tcphdr *th = (void *)(ip6 + 1);
	struct rvs_flow_key k __attribute__((aligned(8))) = {};
	const __u64 *ck, *kk = (const __u64 *)&k;
	struct rvs_flow6_cache *c;
	struct rvs_config *cfg;
	struct rvs_flow *f;
	struct rvs_dest *d;
	__u32 didx, svc, l3len, slot, epoch, *ep, zero = 0;
	__u8 proto, state;
	__u64 now, h, timeout;
	int stale;

	if ((void *)(th + 1) > end)
		return -1;
	/* Version 6 (the caller checked the EtherType). */
	if ((*(__u8 *)ip6 & 0xf0) != 0x60)
		return -1;
	proto = ip6->nexthdr;
	if (proto == IPPROTO_TCP) {
		if ((((__u8 *)th)[13] & (TCPF_SYN | TCPF_FIN | TCPF_RST | TCPF_ACK)) != TCPF_ACK)
			return -1;
		state = RVS_TCP_S_ESTABLISHED;
	} else if (proto == IPPROTO_UDP) {
		state = RVS_UDP_S_NORMAL;
	} else {
		return -1;
	}
	/* Source and destination address are adjacent, as in the key. */
	__builtin_memcpy(k.caddr, &ip6->saddr, 32);
	__builtin_memcpy(&k.cport, &th->source, 4);
	k.proto = proto;
	k.family = RVS_AF_INET6;
	l3len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);

	h = flow6_cache_hash(&k);
	slot = flow6_cache_slot(h);
	c = bpf_map_lookup_elem(&flow6_cache, &slot);
	CALL_SITE_TAG(26);
	slot = flow_epoch_slot(h);
	ep = bpf_map_lookup_elem(&flow_epochs, &slot);
	CALL_SITE_TAG(27);
	if (!c || !ep)
		return -1;
	/* Read before flows (see flow_epoch_bump). */
	epoch = *(volatile __u32 *)ep;
	now = bpf_jiffies64();
	ck = (const __u64 *)&c->key;
	if (ck[0] == kk[0] && ck[1] == kk[1] && ck[2] == kk[2] && ck[3] == kk[3] &&
	    ck[4] == kk[4] && c->epoch == epoch && now - c->stamp < RVS_FLOW_CACHE_JIFFIES) {
		didx = c->dest;
		d = bpf_map_lookup_elem(&dests, &didx);
		CALL_SITE_TAG(28);
		if (d && d->method == RVS_FWD_DR && !(d->flags & RVS_DEST_F_UNAVAILABLE)) {
			count(&svc_stats, c->svc, l3len, 0, 0);
			count(&dest_stats, didx, l3len, 0, 0);
			return l2_out(ctx, d->mac, d->smac, d->ifindex);
		}
	}

	f = bpf_map_lookup_elem(&flows, &k);
	CALL_SITE_TAG(29);
	*found = f;
	*looked = 1;
	if (!f || f->state != state)
		return -1;
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return -1;
	timeout = (proto == IPPROTO_TCP ? cfg->tcp_timeouts[RVS_TCP_S_ESTABLISHED]
					: cfg->udp_timeout) *
		  (__u64)cfg->hz;
	stale = f->last_seen != now;
	if (stale && now - f->last_seen > timeout)
		return -1;
	didx = f->dest;
	d = bpf_map_lookup_elem(&dests, &didx);
	if (!d || d->method != RVS_FWD_DR || (d->flags & RVS_DEST_F_UNAVAILABLE))
		return -1;
	if (stale)
		f->last_seen = now;
	svc = f->svc;
	/* Cached only when the flow cannot expire while its entry is valid
	 * (see fast_established). */
	if (timeout > RVS_FLOW_CACHE_JIFFIES) {
		c->key = k;
#ifdef RVS_BENCH_CACHE_MISS
		c->stamp = now - RVS_FLOW_CACHE_JIFFIES;
#else
		c->stamp = now;
#endif
		c->dest = didx;
		c->svc = svc;
		c->epoch = epoch;
	}
	count(&svc_stats, svc, l3len, 0, 0);
	count(&dest_stats, didx, l3len, 0, 0);
	return l2_out(ctx, d->mac, d->smac, d->ifindex);
}

/* The common packet of an established DR flow, with nothing to decide: an
 * untagged IPv4 frame without options or fragmentation, TCP with ACK and
 * none of SYN/FIN/RST (its state stays ESTABLISHED: no state change, no
 * ActiveConn move) or UDP, whose live flow goes to an available DR real
 * server. It is parsed at fixed offsets, counted and sent on with the
 * fewest instructions.
 *
 * First this CPU's flow cache (no hash-table lookup: a per-CPU array
 * element the verifier inlines): a valid entry (same key, epoch unchanged,
 * checked against flows4 less than RVS_FLOW_CACHE_JIFFIES ago) gives the
 * real server. Otherwise flows4 is looked up, its entry checked as before
 * and stamped, and the cache entry (re)filled. The dests[] element is read
 * on every packet either way, so a real server made unavailable, deleted or
 * switched to another method stops getting the flow's packets at once.
 *
 * Anything else returns -1 for the general path, with the flows4 lookup's
 * result in *found when *looked is set (the general path parses the same
 * 5-tuple and must not pay a second lookup). No side effect happens before
 * the last check. */
static __always_inline int fast_established(struct xdp_md *ctx, struct rvs_flow **found,
					    int *looked)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct tcphdr *th = (void *)(ip + 1);
	struct rvs_flow4_key k __attribute__((aligned(8))) = {};
	struct rvs_flow_cache *c;
	struct rvs_config *cfg;
	struct rvs_flow *f;
	struct rvs_dest *d;
	__u32 didx, svc, l3len, slot, epoch, *ep, zero = 0;
	__u8 proto, state;
	__u64 now, h, timeout;
	int stale;

#ifdef RVS_BENCH_VARY_CLIENT
	/* That build's parse changes the client: the general path only. */
	return -1;
#endif
	/* A whole TCP header's worth (a UDP datagram with less than 12 bytes
	 * of payload in an unpadded frame takes the general path). */
	if ((void *)(th + 1) > end)
		return -1;
	/* Whole-word loads (struct ethhdr is packed: its field would be read
	 * byte by byte). 0x45: version 4, no options. */
	if (*(__be16 *)(data + 12) != bpf_htons(ETH_P_IP)) {
		if (*(__be16 *)(data + 12) == bpf_htons(ETH_P_IPV6))
			return fast_established6(ctx, found, looked);
		return -1;
	}
	if (*(__u8 *)ip != 0x45 || (ip->frag_off & bpf_htons(0x3fff)))
		return -1;
	proto = ip->protocol;
	if (proto == IPPROTO_TCP) {
		if ((((__u8 *)th)[13] & (TCPF_SYN | TCPF_FIN | TCPF_RST | TCPF_ACK)) != TCPF_ACK)
			return -1;
		state = RVS_TCP_S_ESTABLISHED;
	} else if (proto == IPPROTO_UDP) {
		state = RVS_UDP_S_NORMAL;
	} else {
		return -1;
	}
	__builtin_memcpy(k.caddr, &ip->saddr, 4);
	__builtin_memcpy(k.vaddr, &ip->daddr, 4);
	/* Source and destination port (UDP's are at the same place). */
	__builtin_memcpy(&k.cport, &th->source, 4);
	k.proto = proto;
	l3len = bpf_ntohs(ip->tot_len);

	h = flow_cache_hash(&k);
	slot = flow_cache_slot(h);
	c = bpf_map_lookup_elem(&flow_cache, &slot);
	CALL_SITE_TAG(21);
	slot = flow_epoch_slot(h);
	ep = bpf_map_lookup_elem(&flow_epochs, &slot);
	CALL_SITE_TAG(22);
	if (!c || !ep)
		return -1;
	/* Read before flows4 (see flow_epoch_bump). */
	epoch = *(volatile __u32 *)ep;
	now = bpf_jiffies64();
	if (((const __u64 *)&c->key)[0] == ((const __u64 *)&k)[0] &&
	    ((const __u64 *)&c->key)[1] == ((const __u64 *)&k)[1] && c->epoch == epoch &&
	    now - c->stamp < RVS_FLOW_CACHE_JIFFIES) {
		didx = c->dest;
		d = bpf_map_lookup_elem(&dests, &didx);
		CALL_SITE_TAG(23);
		if (d && d->method == RVS_FWD_DR && !(d->flags & RVS_DEST_F_UNAVAILABLE)) {
			count(&svc_stats, c->svc, l3len, 0, 0);
			count(&dest_stats, didx, l3len, 0, 0);
			return l2_out(ctx, d->mac, d->smac, d->ifindex);
		}
	}

	f = bpf_map_lookup_elem(&flows4, &k);
	*found = f;
	*looked = 1;
	if (!f || f->state != state)
		return -1;
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return -1;
	timeout = (proto == IPPROTO_TCP ? cfg->tcp_timeouts[RVS_TCP_S_ESTABLISHED]
					: cfg->udp_timeout) *
		  (__u64)cfg->hz;
	/* Seen in this jiffy: neither expired nor to be stamped again. */
	stale = f->last_seen != now;
	if (stale && now - f->last_seen > timeout)
		return -1;
	didx = f->dest;
	d = bpf_map_lookup_elem(&dests, &didx);
	if (!d || d->method != RVS_FWD_DR || (d->flags & RVS_DEST_F_UNAVAILABLE))
		return -1;
	/* Stored once per jiffy, not per packet: the entry's cache line is
	 * then only read while a flow's packets spread over several CPUs. */
	if (stale)
		f->last_seen = now;
	svc = f->svc;
	/* Cached only when the flow cannot expire while its entry is valid:
	 * then an expired flow (the only kind the control side removes) never
	 * has a valid cache entry. */
	if (timeout > RVS_FLOW_CACHE_JIFFIES) {
		c->key = k;
#ifdef RVS_BENCH_CACHE_MISS
		/* Benchmark build only: the entry is written as on any miss but
		 * born stale, so every packet misses the cache. */
		c->stamp = now - RVS_FLOW_CACHE_JIFFIES;
#else
		c->stamp = now;
#endif
		c->dest = didx;
		c->svc = svc;
		c->epoch = epoch;
	}
	count(&svc_stats, svc, l3len, 0, 0);
	count(&dest_stats, didx, l3len, 0, 0);
	return l2_out(ctx, d->mac, d->smac, d->ifindex);
}

/* -------------------------------------------------------------- program */

SEC("xdp")
int xdp_lb(struct xdp_md *ctx)
{
	struct pkt p = {};
	struct rvs_svc_key sk = {};
	struct rvs_flow nf = {};
	struct rvs_config *cfg;
	struct rvs_svc *svc;
	struct rvs_dest *d;
	struct rvs_flow *f;
	__u32 zero = 0, svc_idx, dest_idx, old_dest = RVS_SLOT_EMPTY;
	__u8 old_state = 0;
	__u32 *svcp;
	__u64 now;
	int syn, is_tcp, hashed, looked = 0;
	struct rvs_flow *found = NULL;

#ifdef RVS_BENCH_CYCLE_FLOWS
	/* Benchmark build only: the frame's client address becomes this run's
	 * key of the cycle, in the packet itself, so the fast path and the
	 * general parse both see it (no checksum to fix: nothing checks it). */
	{
		struct iphdr *ip = (void *)(long)ctx->data + sizeof(struct ethhdr);
		long i = bench_cycle_next();

		CALL_SITE_TAG(30);
		if (i >= 0 && (void *)(ip + 1) <= (void *)(long)ctx->data_end)
			ip->saddr = bpf_htonl(RVS_BENCH_CYCLE_BASE + (__u32)i);
	}
#endif
	{
		int rc = fast_established(ctx, &found, &looked);

		if (rc >= 0)
			return rc;
	}
	if (parse(ctx, &p))
		return XDP_PASS;
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return XDP_PASS;
	if (p.icmp)
		return icmp_error(ctx, &p, cfg);

	is_tcp = p.proto == IPPROTO_TCP;
	syn = is_tcp && (p.tcpflags & TCPF_SYN) && !(p.tcpflags & TCPF_RST);
	/* Jiffies: plenty for timeouts in seconds, and one load (a nanosecond
	 * clock cost ~15 ns per packet here). */
	now = bpf_jiffies64();

	/* Like IPVS's ip_vs_in: the connection table first (only VIP traffic
	 * ever creates entries), the service only for a new connection. */
	f = looked ? found : flow_lookup(p.family, p.saddr, p.daddr, p.sport, p.dport, p.proto);
	if (f) {
		int expired = now - f->last_seen > flow_timeout(cfg, f, p.proto);
		int closed = f->state == RVS_TCP_S_TIME_WAIT || f->state == RVS_TCP_S_CLOSE;
		__u32 didx = f->dest;

		d = bpf_map_lookup_elem(&dests, &didx);
		if (!d)
			return XDP_DROP;
		/* Replaced below if a new flow is inserted over it. */
		old_dest = didx;
		old_state = f->state;
		if (syn && (expired || closed || (d->flags & RVS_DEST_F_UNAVAILABLE)))
			goto new_flow; /* conn_reuse_mode: a new connection */
		if (expired)
			goto new_flow; /* as unknown: TCP non-SYN passes, UDP schedules */
		if (d->flags & RVS_DEST_F_UNAVAILABLE)
			return XDP_DROP; /* IPVS without expire_nodest_conn */
		f->last_seen = now;
		if (is_tcp) {
			__u8 old = f->state;

			f->state = tcp_next_state(old, p.tcpflags,
						  (f->flags & RVS_FLOW_F_NOOUTPUT) ? DIR_INPUT_ONLY
										   : DIR_INPUT);
			conns_move(didx, p.proto, old, f->state);
			/* Cached ESTABLISHED entries of this flow must go. */
			if (f->state != old)
				flow_epoch_bump(&p);
		}
		count(&svc_stats, f->svc, p.l3len, 0, 0);
		count(&dest_stats, didx, p.l3len, 0, 0);
		return forward(ctx, &p, d, cfg);
	}

new_flow:
	sk.proto = p.proto;
	sk.family = p.family;
	sk.port = p.dport;
	__builtin_memcpy(sk.vip, p.daddr, 16);
	svcp = bpf_map_lookup_elem(&services, &sk);
	CALL_SITE_TAG(24);
	if (!svcp) {
		/* A port-zero service takes every other port of its VIP (IPVS's
		 * catch-all, looked up after the exact port). */
		sk.port = 0;
		svcp = bpf_map_lookup_elem(&services, &sk);
		CALL_SITE_TAG(25);
	}
	if (!svcp)
		return nat_reply(ctx, &p, cfg);
	svc_idx = *svcp;
	svc = bpf_map_lookup_elem(&svc_info, &svc_idx);
	if (!svc || svc->sched == RVS_SCHED_NONE)
		return XDP_PASS;
	hashed = svc->sched == RVS_SCHED_MH || svc->sched == RVS_SCHED_SH ||
		 svc->sched == RVS_SCHED_DH;
	/* A TCP segment without SYN for an unknown flow is not ours (IPVS), but
	 * with the SYN-flood guard on, flows of hash-scheduled services may
	 * have no entry: those are forwarded by the hash, statelessly. */
	if (is_tcp && !syn && !(cfg->max_new_flows && hashed))
		return XDP_PASS;
	if (svc->flags & RVS_SVC_F_PERSISTENT)
		dest_idx = schedule_persistent(svc, svc_idx, &p, sk.port, cfg, now);
	else
		dest_idx = schedule(svc, svc_idx, &p);
	if (dest_idx == RVS_SLOT_EMPTY)
		return XDP_PASS;
	d = bpf_map_lookup_elem(&dests, &dest_idx);
	if (!d)
		return XDP_PASS;
	if (is_tcp && !syn) {
		if (d->method == RVS_FWD_NAT)
			return XDP_PASS;
		count(&svc_stats, svc_idx, p.l3len, 0, 0);
		count(&dest_stats, dest_idx, p.l3len, 0, 0);
		return forward(ctx, &p, d, cfg);
	}
	nf.last_seen = now;
	nf.dest = dest_idx;
	nf.svc = svc_idx;
	nf.flags = RVS_FLOW_F_NOOUTPUT;
	nf.state = is_tcp ? tcp_next_state(RVS_TCP_S_NONE, p.tcpflags, DIR_INPUT_ONLY)
			  : RVS_UDP_S_NORMAL;
	/* Under a flood, hash-scheduled DR/TUN flows need no entry: the next
	 * packet hashes to the same server (as long as the table does not
	 * change). rr/wrr and NAT always need theirs. */
	if (!(!is_tcp && (svc->flags & RVS_SVC_F_ONEPACKET)) &&
	    !(flood_over(cfg, now) && hashed && d->method != RVS_FWD_NAT) &&
	    flow_insert(&p, &nf) == 0) {
		if (old_dest != RVS_SLOT_EMPTY)
			conns_add(old_dest, state_active(p.proto, old_state), -1);
		conns_add(dest_idx, state_active(p.proto, nf.state), 1);
	}
	/* A new flow (inserted, or forwarded without an entry under a flood or
	 * -o) replaces whatever a cache may still hold for this key: a flow
	 * the LRU evicted, or a closed one, may be cached on another CPU. */
	flow_epoch_bump(&p);
	if (d->method == RVS_FWD_NAT) {
		struct rvs_nat_key nk = {};
		struct rvs_nat nv = {};

		__builtin_memcpy(nk.raddr, d->addr, 16);
		__builtin_memcpy(nk.caddr, p.saddr, 16);
		nk.rport = d->port ? d->port : p.dport;
		nk.cport = p.sport;
		nk.proto = p.proto;
		nk.family = p.family;
		__builtin_memcpy(nv.vaddr, p.daddr, 16);
		nv.vport = p.dport;
		nv.svc = svc_idx;
		nv.dest = dest_idx;
		bpf_map_update_elem(&nat_rev, &nk, &nv, BPF_ANY);
	}
	count(&svc_stats, svc_idx, p.l3len, 0, 1);
	count(&dest_stats, dest_idx, p.l3len, 0, 1);
	return forward(ctx, &p, d, cfg);
}
