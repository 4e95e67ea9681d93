/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * rvs.h: the ONE definition of every BPF map key and value, and of every
 * constant shared by the rvs BPF programs and the Rust side (crates/xdp).
 *
 * The Rust mirrors in crates/xdp/src/maps.rs are checked against the BTF of
 * the compiled object by a test (sizes and field offsets), so a change here
 * that is not made there fails the build's tests.
 *
 * Rules for every struct: fixed-width integers only, every padding byte an
 * explicit field (hash keys compare padding: it must be zero), addresses as
 * 16 bytes in network order (IPv4 in the first 4 bytes, the rest zero; the
 * one exception, rvs_flow4_key, holds IPv4 addresses in 4 bytes), ports in
 * network order (__be16).
 */
#ifndef RVS_H
#define RVS_H

#include <linux/types.h>

/* ---- limits (map sizes; flows/nat/slots can be changed at load time) ---- */
#define RVS_MAX_SERVICES 65536
#define RVS_MAX_DESTS 65536
#define RVS_SLOTS_DEFAULT (1u << 20)
#define RVS_FLOWS_DEFAULT (1u << 20)
/* Entries of each embryonic table (TCP flows whose handshake has not
 * completed; resized at load time with the flow tables). */
#define RVS_EMBRYONIC_DEFAULT (1u << 18)
/* Real servers one rr/wrr/sh fallback walk may look at (bounded loops). */
#define RVS_MAX_SVC_DESTS 256
/* lblc/lblcr destination-address entries (all services; LRU). */
#define RVS_LOCALITY_MAX 65536
/* Client source ranges of all services (src_ranges). */
#define RVS_SRC_RANGES_MAX 16384
/* Per-CPU flow cache in front of flows4 (entries per CPU) and the shared
 * epochs that invalidate it (both powers of two: indexes are hash bits). */
#define RVS_FLOW_CACHE_SIZE (1u << 16)
#define RVS_FLOW_EPOCHS (1u << 16)
/* Per-CPU flow cache in front of `flows` (IPv6 flows; entries per CPU, a
 * power of two). 64-byte entries: 1 MiB per CPU. It shares flow_epochs
 * with the IPv4 cache. */
#define RVS_FLOW6_CACHE_SIZE (1u << 14)
/* Jiffies a cache entry serves packets after it was last checked against
 * flows4 (32 = 128 ms at HZ 250, 32 ms at HZ 1000, 320 ms at HZ 100). It
 * bounds how far flows4's last_seen may lag behind a flow's packets, how
 * long an entry may outlive its flows4 entry (LRU eviction, removal by the
 * control side) and how long a shortened ESTABLISHED/UDP timeout takes to
 * reach a cached flow; it must stay well below the control side's grace
 * before a deleted real server's index is reused (two reports, >= 1 s). */
#define RVS_FLOW_CACHE_JIFFIES 32
/* The flow cache's hash of a 16-byte IPv4 flow key (two 64-bit words w0,
 * w1 as they lie in memory, little-endian): h = ((w0 ^ SEED) * MUL);
 * h = ((h ^ (h >> 32) ^ w1) * MUL); h ^= h >> 32. Cache index: the low
 * bits, epoch slot: bits 16 and up (see flow_cache_hash in xdp_lb.c and
 * rvs_xdp::maps::flow_cache_hash, which must agree). */
/* The IPv6 cache hashes the 40-byte rvs_flow_key the same way over its five
 * words w0..w4: h = ((w0 ^ SEED) * MUL); then for w1..w4 in turn h = ((h ^
 * (h >> 32) ^ wi) * MUL); h ^= h >> 32 (for two words: the IPv4 formula).
 * Cache index: the low bits; epoch slot: bits 16 and up, as for IPv4. */
#define RVS_FLOW_CACHE_SEED 0x5256535f63616368ull
#define RVS_FLOW_CACHE_MUL 0x9e3779b97f4a7c15ull
/* Members of one lblcr server set (the kernel's sets are unbounded; a
 * member joining a full set pushes the oldest one out). */
#define RVS_LBLCR_SET_MAX 8

/* ---- address families and protocols (kernel values) ---- */
#define RVS_AF_INET 2
#define RVS_AF_INET6 10
#define RVS_PROTO_TCP 6
#define RVS_PROTO_UDP 17

/* ---- scheduler ids: 1 + the index in rvs-core's SCHEDULER_NAMES ---- */
#define RVS_SCHED_NONE 0
#define RVS_SCHED_RR 1
#define RVS_SCHED_WRR 2
#define RVS_SCHED_LC 3
#define RVS_SCHED_WLC 4
#define RVS_SCHED_LBLC 5
#define RVS_SCHED_LBLCR 6
#define RVS_SCHED_DH 7
#define RVS_SCHED_SH 8
#define RVS_SCHED_SED 9
#define RVS_SCHED_NQ 10
#define RVS_SCHED_FO 11
#define RVS_SCHED_OVF 12
#define RVS_SCHED_MH 13
#define RVS_SCHED_TWOS 14

/* ---- forwarding methods ---- */
#define RVS_FWD_NAT 1      /* -m: destination rewrite, replies rewritten back */
#define RVS_FWD_DR 2       /* -g: MAC rewrite, same L2 segment */
#define RVS_FWD_TUN_IPIP 3 /* -i --tun-type ipip: IPv4-in-IPv4 / IPv6-in-IPv6 */
#define RVS_FWD_TUN_GUE 4  /* -i --tun-type gue: outer IP/UDP + 4-byte GUE header */
#define RVS_FWD_FNAT 5     /* FULLNAT: source -> local address:port, destination -> RS */
#define RVS_FWD_TUN_GRE 6    /* -i --tun-type gre: outer IP + GRE (RFC 2784) */
#define RVS_FWD_TUN_GENEVE 7 /* -i --tun-type geneve (rvs): outer IP/UDP 6081 + Geneve */
/* -i --tun-type opt (rvs): DSR without a tunnel. The destination becomes the
 * real server's address:port and the service's address:port rides in an
 * IPv4 option / IPv6 Destination Options header (lib/dsr_opt.h); the real
 * server's node takes it out and answers from the service (bpf/dsr_rs.c). */
#define RVS_FWD_TUN_OPT 8

/* ---- service flags (the IPVS IP_VS_SVC_F_* bits) ---- */
#define RVS_SVC_F_PERSISTENT 0x0001
#define RVS_SVC_F_HASHED 0x0002
#define RVS_SVC_F_ONEPACKET 0x0004
#define RVS_SVC_F_SCHED1 0x0008 /* sh-fallback / mh-fallback */
#define RVS_SVC_F_SCHED2 0x0010 /* sh-port / mh-port */
/* rvs: new flows only from the service's client source ranges (src_ranges;
 * Kubernetes' loadBalancerSourceRanges, lib/src_range.h) */
#define RVS_SVC_F_SRC_RANGES 0x0020

/* ---- real-server flags ---- */
#define RVS_DEST_F_UNAVAILABLE 0x0001 /* deleted: never chosen; existing flows dropped */
#define RVS_DEST_F_OVERLOADED 0x0002  /* above its upper threshold: not chosen */
#define RVS_DEST_F_NEXTHOP 0x0004     /* NAT: mac/smac/ifindex hold the resolved next hop */
/* TUN: checksum the encapsulation (--tun-csum): GUE/Geneve the outer UDP
 * checksum, GRE the C bit and the GRE checksum (RFC 2784). */
#define RVS_DEST_F_TUN_CSUM 0x0100

/* Marks an empty bucket in `slots`. */
#define RVS_SLOT_EMPTY 0xffffffffu
/* Scheduling's answer for a client outside the service's source ranges
 * (lib/src_range.h): the packet is dropped. */
#define RVS_SLOT_REFUSED 0xfffffffeu

/* ---- config flags ---- */
#define RVS_CFG_F_NAT 0x0001 /* some real server uses NAT: look up replies */
#define RVS_CFG_F_FNAT 0x0002 /* some service has local addresses: look replies up in fnat_laddrs */

/* ---- flow flags ---- */
#define RVS_FLOW_F_NOOUTPUT 0x01 /* no reply seen yet (always set for DR/TUN) */
/* FULLNAT: the real server's SYN-ACK armed the TOA (lib/fnat.h): the client's
 * segments take xdp_fnat's full path, which inserts it, until it is
 * disarmed. */
#define RVS_FLOW_F_TOA 0x02

/* ---- IPVS TCP states (the numbering of ip_vs_proto_tcp.c / the sync protocol) ---- */
#define RVS_TCP_S_NONE 0
#define RVS_TCP_S_ESTABLISHED 1
#define RVS_TCP_S_SYN_SENT 2
#define RVS_TCP_S_SYN_RECV 3
#define RVS_TCP_S_FIN_WAIT 4
#define RVS_TCP_S_TIME_WAIT 5
#define RVS_TCP_S_CLOSE 6
#define RVS_TCP_S_CLOSE_WAIT 7
#define RVS_TCP_S_LAST_ACK 8
#define RVS_TCP_S_LISTEN 9
#define RVS_TCP_S_SYNACK 10
#define RVS_TCP_S_LAST 11
/* The one UDP state. */
#define RVS_UDP_S_NORMAL 0

/* ---- tunnels ---- */
/* GUE (draft-ietf-intarea-gue) variant 0 header: ver/C/hlen, proto, flags. */
#define RVS_GUE_HDR_LEN 4
#define RVS_TUN_TTL 64
/* GRE (RFC 2784): flags/version, protocol (the inner ethertype); with the
 * C bit 4 more bytes (checksum, reserved). */
#define RVS_GRE_HDR_LEN 4
#define RVS_GRE_CSUM_LEN 4
/* DSR by IP option (RVS_FWD_TUN_OPT), the wire format Cilium's NodePort DSR
 * uses: IPv4 option type 0x9a (copied, class 0, number 26), 8 bytes: type,
 * length, service port, service address; IPv6 Destination Options header of
 * 24 bytes: next header, length 2 (3 x 8 bytes), option type 0x1b (skipped
 * by a node that does not know it), option length 20, service address,
 * service port, two Pad1. Inserted right after the fixed IP header. */
#define RVS_DSR_OPT4_TYPE 0x9a
#define RVS_DSR_OPT4_LEN 8
#define RVS_DSR_OPT6_TYPE 0x1b
#define RVS_DSR_OPT6_LEN 24
#define RVS_DSR_OPT6_OPTLEN 20

/* The two option layouts (wire formats, no map uses them). */
struct dsr_opt4 {
	__u8 type; /* RVS_DSR_OPT4_TYPE */
	__u8 len;  /* RVS_DSR_OPT4_LEN */
	__be16 port;
	__be32 addr;
};

struct dsr_opt6 {
	__u8 nexthdr; /* the upper-layer protocol (TCP, UDP) */
	__u8 hdrlen;  /* (RVS_DSR_OPT6_LEN / 8) - 1 */
	__u8 type;    /* RVS_DSR_OPT6_TYPE */
	__u8 len;     /* RVS_DSR_OPT6_OPTLEN */
	__u8 addr[16];
	__be16 port;
	__u8 pad[2]; /* two Pad1 options (zero) */
};
/* Geneve (RFC 8926) without options: ver/optlen, flags, protocol (the inner
 * ethertype: IP directly, no inner Ethernet), VNI 0, reserved. */
#define RVS_GENEVE_HDR_LEN 8
#define RVS_GENEVE_PORT 6081
/* A tunnel checksum sums the packet in chunks of this many bytes, at most
 * RVS_CSUM_CHUNKS of them (more than one XDP buffer holds). */
#define RVS_CSUM_CHUNK 512
#define RVS_CSUM_CHUNKS 8

/* ---- scheduler hash constants (see rvs-core sched/sh.rs and sched/mh.rs) ---- */
#define RVS_GOLDEN_RATIO_32 0x61C88647u
#define RVS_SH_TAB_BITS 8
#define RVS_DH_TAB_BITS 8
#define RVS_MH_HASH1_KEY 2654435761ull
#define RVS_MH_HASH2_KEY 2654446892ull

/* services: HASH key -> u32 service index (into svc_info). */
struct rvs_svc_key {
	__u8 proto;  /* RVS_PROTO_* */
	__u8 family; /* RVS_AF_* */
	__be16 port; /* VIP port */
	__u8 vip[16];
};

/* svc_info: ARRAY[service index]. Writing one element switches the service
 * to new scheduling data atomically (the control side fills a fresh region
 * of `slots` first, then flips this element, then frees the old region). */
struct rvs_svc {
	__u8 sched;  /* RVS_SCHED_*; NONE = slot unused */
	__u8 family; /* of the VIP */
	__u16 pad0;
	__u32 flags; /* RVS_SVC_F_* */
	__u32 table_off; /* sh/dh/mh bucket table or wrr sequence in `slots` */
	__u32 table_len;
	__u32 dests_off; /* the real-server list (dest indexes) in `slots` */
	__u32 dests_len;
	__u32 persist_timeout; /* seconds, with RVS_SVC_F_PERSISTENT */
	__u8 persist_mask[16]; /* -M netmask / IPv6 prefix as a byte mask */
};

/* dests: ARRAY[real-server index]. */
struct rvs_dest {
	__u8 addr[16];
	__be16 port;  /* 0 = the VIP's port */
	__u8 family;  /* RVS_AF_* */
	__u8 method;  /* RVS_FWD_* */
	__u32 flags;  /* RVS_DEST_F_* */
	__u32 weight; /* 0 = quiesced: no new flows */
	__u32 ifindex; /* egress for DR/TUN; 0 or the ingress = XDP_TX */
	__u8 mac[6];   /* DR: the real server's MAC; TUN: the next hop's */
	__u8 smac[6];  /* source MAC on `ifindex` (used when redirecting) */
	__be16 gue_port; /* GUE: UDP destination port */
	__u16 pad0;
};

/* flows: LRU_HASH, the client-side 5-tuple as the client sent it (IPv6
 * flows; IPv4 ones live in flows4). */
struct rvs_flow_key {
	__u8 caddr[16];
	__u8 vaddr[16];
	__be16 cport;
	__be16 vport;
	__u8 proto;
	__u8 family;
	__u16 pad0;
};

/* embryonic4 / embryonic: LRU_HASH, same keys and value as flows4 / flows,
 * for TCP flows that have seen a SYN and not yet the ACK that completes the
 * handshake (SYN_RECV), while the embryonic tables are armed (new flows on
 * this CPU above max_new_flows, or half-open ones above
 * RVS_EMBRYONIC_ARM_RATE, per second, and
 * RVS_EMBRYONIC_ARM_SECS after; struct rvs_flood). A flood of spoofed SYNs
 * then fills and churns only these tables (the least recently used
 * embryonic entry is evicted); the flow tables hold flows that completed
 * their handshake, which such a flood cannot evict. The ACK that makes a
 * flow ESTABLISHED moves it. Unarmed, a SYN's flow goes straight to the flow
 * table (SYN_RECV there). Both count in dest_conns (SYN_RECV is active, as
 * in IPVS) and are listed. */

/* flows4: LRU_HASH, the IPv4 flows under a 16-byte key (the same 5-tuple):
 * the kernel hashes (jhash) and compares the whole key on every lookup, and
 * 16 bytes cost ~6 ns less per packet than the 40 of rvs_flow_key, which
 * `flows` keeps for IPv6. Same value type. */
struct rvs_flow4_key {
	__u8 caddr[4];
	__u8 vaddr[4];
	__be16 cport;
	__be16 vport;
	__u8 proto;
	__u8 pad0;
	__u16 pad1;
};

struct rvs_flow {
	__u64 last_seen;    /* jiffies (bpf_jiffies64) of the last packet */
	__u32 dest;         /* real-server index */
	__u32 svc;          /* service index */
	__u8 state;         /* RVS_TCP_S_* or RVS_UDP_S_NORMAL */
	__u8 flags;         /* RVS_FLOW_F_* */
	/* FULLNAT over IPv4 (lib/fnat.h): the flow's (local address, local
	 * port) as xdp_fnat last found or allocated it in fnat_fwd/fnat_rev
	 * (which stay the truth the allocator and the reply path use), so
	 * that its established client packets are rewritten in xdp_lb without
	 * the tail call and both look-ups. Network order; fnat_lport 0 = none
	 * recorded (IPv6 flows, a flow's first packets, flows written by the
	 * control side): the full path then. */
	__be16 fnat_lport;
	__be32 fnat_laddr;
};

/* flow_cache: PERCPU_ARRAY[hash & (RVS_FLOW_CACHE_SIZE - 1)], a
 * direct-mapped cache of established IPv4 DR flows, consulted before
 * flows4 so the common packet pays no hash-table lookup. An entry is valid
 * while its key is the packet's, its epoch equals flow_epochs[slot of the
 * key] (every write of the program or the control side to a flows4 entry
 * bumps that slot) and it is younger than RVS_FLOW_CACHE_JIFFIES. */
struct rvs_flow_cache {
	struct rvs_flow4_key key;
	__u64 stamp; /* jiffies when it was last checked against flows4 */
	__u32 dest;  /* real-server index */
	__u32 svc;   /* service index */
	__u32 epoch; /* flow_epochs[slot] read before that check */
	__u32 pad0;
};

/* flow6_cache: PERCPU_ARRAY[hash & (RVS_FLOW6_CACHE_SIZE - 1)], the same
 * cache for established IPv6 DR flows in front of `flows` (validated the
 * same way, by the same flow_epochs). */
struct rvs_flow6_cache {
	struct rvs_flow_key key;
	__u64 stamp; /* jiffies when it was last checked against flows */
	__u32 dest;  /* real-server index */
	__u32 svc;   /* service index */
	__u32 epoch; /* flow_epochs[slot] read before that check */
	__u32 pad0;
};

/* nat_rev: LRU_HASH for the NAT reply path, keyed by the reply's
 * (source = real server, destination = client). */
struct rvs_nat_key {
	__u8 raddr[16];
	__u8 caddr[16];
	__be16 rport;
	__be16 cport;
	__u8 proto;
	__u8 family;
	__u16 pad0;
};

struct rvs_nat {
	__u8 vaddr[16]; /* the VIP to restore as the source */
	__be16 vport;
	__u16 pad0;
	__u32 svc;
	__u32 dest;
};

/* svc_stats / dest_stats: PERCPU_ARRAY, IPVS's counters. */
struct rvs_stats {
	__u64 conns;
	__u64 inpkts;
	__u64 outpkts;
	__u64 inbytes;
	__u64 outbytes;
};

/* config: ARRAY[0], the director's own settings. */
struct rvs_config {
	__u8 tun_src4[4];  /* outer source of IPv4 tunnels */
	__u8 tun_src6[16]; /* outer source of IPv6 tunnels */
	__u32 tcp_timeouts[RVS_TCP_S_LAST]; /* seconds per TCP state */
	__u32 udp_timeout; /* seconds */
	__u32 flags;       /* RVS_CFG_F_* */
	__u32 hz;          /* the kernel's HZ: jiffies per second */
	/* SYN-flood guard: new flows per CPU per second above which flows of
	 * hash-scheduled (sh/dh/mh) DR/TUN services are forwarded without a
	 * flow entry (the hash gives the same server again); 0 = no limit. */
	__u32 max_new_flows;
	/* Largest outer packet a tunnel may send (the path MTU toward the real
	 * servers); a bigger one that may not be fragmented (IPv4 DF, every
	 * IPv6 packet) is answered with ICMP "fragmentation needed" / "packet
	 * too big" carrying this minus the tunnel headers. 0 = no check. */
	__u32 tun_mtu;
	/* Low bits of the outer tunnel source taken from the flow hash, so a
	 * receiver's RSS spreads flows (tun_src4/tun_src6 then name the
	 * prefix); 0 = the fixed source. IPv4 at most 16, IPv6 at most 32. */
	__u8 tun_vary4;
	__u8 tun_vary6;
	__u16 pad0;
	/* lblc/lblcr: seconds after which an unused destination-address entry
	 * is gone, and an unchanged lblcr set may shed its most loaded member
	 * (the lblc_expiration / lblcr_expiration sysctls); 0 = never. */
	__u32 locality_expiration;
};

/* persist: LRU_HASH, persistence templates (-p, -M): a client network
 * (address masked with the service's netmask) sticks to one real server for
 * new flows while the template is younger than the persistence timeout. */
struct rvs_persist_key {
	__u8 caddr[16]; /* client address & persist_mask */
	__u8 vaddr[16];
	__be16 vport;
	__u8 proto;
	__u8 family;
};

struct rvs_persist {
	__u64 last_seen; /* jiffies of the last new flow that used it */
	__u32 dest;
	__u32 svc;
};

/* dest_conns: ARRAY[real-server index], IPVS's ActiveConn / InActConn,
 * kept by the program as flows are created and change TCP state (atomic
 * adds: all CPUs share them). Flows that expire or are evicted without being
 * seen again are subtracted by the control side's sweep. */
struct rvs_dest_conns {
	__u32 active;   /* flows in ESTABLISHED, SYN_SENT, SYN_RECV, SYNACK */
	__u32 inactive; /* every other flow (all UDP flows) */
};

/* svc_flood: PERCPU_ARRAY[service index], what the SYN-flood defences did
 * with the service's new TCP flows (rvs_xdp_* metrics). */
struct rvs_svc_flood {
	__u64 embryonic; /* SYNs that made an entry in the embryonic table */
	__u64 promoted;  /* embryonic flows whose handshake completed (moved to
			  * the flow table); embryonic - promoted = shed */
	__u64 guarded;   /* new flows forwarded by the hash without an entry */
	__u64 unknown;   /* TCP segments without SYN of no known flow, passed
			  * to the kernel (an evicted flow, a stray ACK) */
	__u64 adopted;   /* TCP segments without SYN of no known flow of a
			  * hash-scheduled service that got a flow entry (a
			  * flow ECMP moved here from another director) */
	__u64 refused;   /* new flows dropped: the client is outside the
			  * service's source ranges (RVS_SVC_F_SRC_RANGES) */
};

/* src_ranges: LPM_TRIE of the client source ranges of the services flagged
 * RVS_SVC_F_SRC_RANGES (lib/src_range.h). The prefix covers the service
 * index (32 bits, always whole) and then `addr` (an IPv4 address in its
 * first 4 bytes): prefixlen = 32 + the range's prefix length. */
struct rvs_src_key {
	__u32 prefixlen;
	__u32 svc;
	__u8 addr[16];
};

/* flood: PERCPU_ARRAY[0], this CPU's new flows per second: the guard's
 * window, and whether the embryonic tables are armed (lib/tcp_state.h
 * flood_note). */
struct rvs_flood {
	__u64 second;      /* jiffies / hz of the window */
	__u32 count;       /* new flows seen in it */
	__u32 completed;   /* TCP handshakes completed in it (SYN_RECV to
			    * ESTABLISHED): count - completed is its
			    * half-open new flows, what arms the embryonic
			    * tables without max_new_flows. (count was a
			    * __u64 before: on pinned maps the old value's
			    * high half, 0, reads as completed 0.) */
	__u64 armed_until; /* the embryonic tables take new TCP flows up to
			    * this second (0: never armed) */
};

/* Half-open new flows (new flows less handshakes completed) per CPU per
 * second above which new TCP flows start in the embryonic tables (with
 * max_new_flows set: new flows above that limit, the guard's count), and
 * the seconds they stay armed after the last second above it. Below it a
 * SYN goes straight to the flow table (one insert; no promotion at its
 * ACK), so a flood slower than this can churn the flow table no faster
 * than legitimate new connections at this rate would; and legitimate new
 * connections, whose handshakes complete, never arm the tables however
 * fast they come (a flood of SYNs followed by blind ACKs completes its
 * handshakes too, but such ACKs promote the flows out of the embryonic
 * tables anyway: against it only the guard helps). */
#define RVS_EMBRYONIC_ARM_RATE 4096
#define RVS_EMBRYONIC_ARM_SECS 60

/* embryonic_seen: ARRAY[0], __u64: the latest jiffy at which any CPU wrote
 * an embryonic entry's last_seen (an insert, or a packet of a flow found
 * there), so that the tables are not looked up while none of their entries
 * can be live: an entry counts as absent once older than its state's
 * timeout, so none is live later than the longest TCP timeout (plus a
 * second for two CPUs' racing stores) after this. 0: never written (a
 * fresh start: the tables are empty). RVS_EMBRYONIC_SEEN_UNKNOWN: not
 * known (the plane writes it when this program replaces another on pinned
 * maps, which may have written entries unstamped: an upgrade from a build
 * without the stamp, a downgrade): the program's first look makes it
 * `now`. */
#define RVS_EMBRYONIC_SEEN_UNKNOWN 0xffffffffffffffffULL

/* locality: LRU_HASH, lblc/lblcr's table (ip_vs_lblc.c, ip_vs_lblcr.c):
 * per service, the packet's destination address -> the real server (lblc:
 * members[0]) or the server set (lblcr: members, newest first). Differences
 * from the kernel's table, which a timer collects: an entry unused for
 * config.locality_expiration is ignored (and overwritten) at once, where the
 * kernel deletes it at its next half-hourly full check; the kernel's
 * partial check (over 16384 entries, idle ones first) is the LRU's eviction
 * here, over all services. */
struct rvs_locality_key {
	__u32 svc;
	__u8 family;
	__u8 pad0[3];
	__u8 daddr[16];
};

struct rvs_locality {
	__u64 lastuse; /* jiffies of the last decision that looked it up */
	__u64 lastmod; /* lblcr: jiffies of the last member added or removed */
	__u32 count;   /* members in use */
	__u32 members[RVS_LBLCR_SET_MAX]; /* dest indexes */
	__u32 pad0;
};

/* own_macs: a global (section .data.own_macs: a one-element array map to
 * the loader), the destination MACs the director acts on: per
 * attached interface (ingress ifindex) its own MAC, plus extra MACs it owns
 * there (a VRRP virtual MAC 00:00:5e:00:01:VRID of a use_vmac macvlan on
 * top of it). A unicast frame to any other MAC (bridge flooding, a
 * promiscuous NIC) is passed to the kernel untouched and counted in
 * foreign_frames; multicast and broadcast frames are passed too. Written by
 * the loader when it attaches; count 0 (a program never attached, as in a
 * test run without the table filled) filters nothing. One array element
 * read with plain loads: no hash lookup per packet. */
#define RVS_OWN_MACS_MAX 16

struct rvs_own_mac {
	__u32 ifindex;
	__u8 mac[6];
	__u8 pad0[2];
};

struct rvs_own_macs {
	__u32 count; /* entries in use, from the first */
	__u32 pad0;
	struct rvs_own_mac e[RVS_OWN_MACS_MAX];
};

/* nh_missing: HASH[next hop], the next hops a NAT-rewritten packet found
 * unresolved (bpf_fib_lookup said NO_NEIGH: the client, or the gateway
 * toward it, for a reply; the real server or its gateway otherwise), with
 * the egress ifindex. Written by the program once per next hop (NOEXIST);
 * drained by the control plane, which makes the kernel resolve them: a
 * director that takes a NAT flow over (VRRP failover) has no neighbour
 * entry for its clients, and the kernel drops the replies it is passed
 * meanwhile as martians (their source, the VIP, is local). Bounded; a
 * next hop that finds the table full is counted in nh_missing_full. */
#define RVS_NH_MISSING_MAX 256

struct rvs_nh_key {
	__u8 addr[16]; /* network order; IPv4 in the first 4 bytes */
	__u8 family;   /* RVS_AF_INET / RVS_AF_INET6 */
	__u8 pad0[3];
};

/* ---- FULLNAT (the xdp_fnat program, reached by tail call) ---- */
/* Local addresses one service's pool may hold in the program (the plane
 * expands ranges and refuses a bigger pool before anything changes). */
#define RVS_FNAT_POOL_MAX 16
/* Local ports a pool hands out unless it says otherwise: 1024..65535. */
#define RVS_FNAT_PORT_MIN 1024
#define RVS_FNAT_PORT_MAX 65535
/* fnat_prog's slot of xdp_fnat. */
#define RVS_FNAT_PROG 0
/* fnat_tmp's `kind`: what the main program hands the FULLNAT program. */
#define RVS_FNAT_INBOUND 1 /* a packet of a FULLNAT flow, client -> VIP */
#define RVS_FNAT_REPLY 2   /* a packet to one of the local addresses */
/* ICMP errors about a FULLNAT flow (lib/fnat.h): from the client's side
 * about a reply VIP -> client (to the real server), and from the real
 * server's side about a packet laddr -> RS (to the client). */
#define RVS_FNAT_ICMP_IN 3
#define RVS_FNAT_ICMP_OUT 4

/* fnat_pools: ARRAY[service index], the service's local addresses (count 0
 * = no pool: its FULLNAT flows are dropped and counted as exhausted) and
 * the local port range [port_min, port_max] (host order, port_min >= 1:
 * port 0 marks a refused connection in fnat_fwd). */
struct rvs_fnat_pool {
	__u32 count;
	__u16 port_min;
	__u16 port_max;
	__u8 family; /* RVS_AF_* of every address */
	__u8 pad0[3];
	__u8 addrs[RVS_FNAT_POOL_MAX][16];
};

/* fnat_rev: HASH (never LRU: an eviction would free a live flow's pair
 * for another flow), a FULLNAT flow as its real server sees it (the reply's
 * source = real server, destination = local address), inserted with
 * BPF_NOEXIST: two live flows can never share a (local address, port)
 * toward the same real server port; a full table refuses new flows
 * (counted as exhausted). Entries go when their flow expires or is gone
 * from the flow tables (rvsd's report, crates/xdp/src/plane/report.rs).
 * The value restores the client side. */
struct rvs_fnat_key {
	__u8 raddr[16];
	__u8 laddr[16];
	__be16 rport;
	__be16 lport;
	__u8 proto;
	__u8 family;
	__u16 pad0;
};

struct rvs_fnat {
	__u8 caddr[16];
	__u8 vaddr[16];
	__be16 cport;
	__be16 vport;
	__u32 svc;
	__u32 dest;
	/* TOA (lib/fnat.h): the acknowledgment number (network order) of the
	 * client's segments that get the TOA: the real server's SYN-ACK
	 * sequence + 1, set when that SYN-ACK passes; 0 = none (no SYN-ACK
	 * yet, or the real server has sent past its handshake). */
	__u32 toa_ack;
};

/* fnat_fwd: HASH, rvs_flow_key (the client's tuple, any family) -> the
 * flow's fnat_rev key: the inbound rewrite (source -> laddr:lport,
 * destination -> raddr:rport); lport 0 (laddr zero) marks a connection
 * refused for want of a pair (its retransmitted SYNs try again but are not
 * counted again). A plain hash like fnat_rev: an LRU eviction would cut a
 * live flow from its pair (its next packet would take another and break
 * the connection, and the old pair would stay held); a full table refuses
 * new flows (counted). Freed with fnat_rev. */

/* fnat_laddrs: HASH, rvs_nh_key (a local address and its family) -> u32
 * (unused, 0): the packets to these addresses that find no flow are handed
 * to xdp_fnat as replies. */
#define RVS_FNAT_LADDRS_MAX 4096

/* fnat_full (lib/maps.h): (service, real server) pairs whose last pool walk
 * found every pair taken; a new flow toward one within a quarter second of
 * that walk is refused without walking again. */
#define RVS_FNAT_FULL_MAX 4096

/* fnat_tmp's `table`: where xdp_fnat records an inbound flow's pair and TOA
 * flag in the flow entry (rvs_flow's fnat_lport/fnat_laddr, RVS_FLOW_F_TOA)
 * when they differ from what xdp_lb found there. */
#define RVS_FNAT_REC_NONE 0      /* nowhere (a new flow's first packet) */
#define RVS_FNAT_REC_FLOWS 1     /* flows4 */
#define RVS_FNAT_REC_EMBRYONIC 2 /* embryonic4 */

/* fnat_tmp: PERCPU_ARRAY[0], what xdp_lb hands xdp_fnat across the tail
 * call (same CPU, same packet). */
struct rvs_fnat_tmp {
	__u32 kind; /* RVS_FNAT_INBOUND / _REPLY / _ICMP_IN / _ICMP_OUT */
	__u32 dest;
	__u32 svc;
	/* RVS_FNAT_INBOUND: the flow entry's fnat_laddr, fnat_lport and
	 * RVS_FLOW_F_TOA as xdp_lb read them, and where to record (RVS_FNAT_REC_*). */
	__be32 laddr;
	__be16 lport;
	__u8 table;
	__u8 flags;
	__u32 pad0;
};

/* fnat_stats: PERCPU_ARRAY[service index]. */
struct rvs_fnat_stats {
	/* Connections refused: no free (local address, port) toward their
	 * real server, or fnat_rev/fnat_fwd full; each once, whatever number
	 * of SYNs (or datagrams) it sends while refused (see fnat_fwd). */
	__u64 exhausted;
	__u64 allocated; /* (local address, port) pairs handed out */
	/* TOA (lib/fnat.h, lib/toa_insert.h): client segments of the
	 * handshake that got the option, that had no room for it (40 option
	 * bytes), that it would have pushed past the MTU, that it failed on
	 * otherwise (malformed, no headroom); real servers' SYN-ACKs whose MSS
	 * was lowered by the option's length. */
	__u64 toa_inserted;
	__u64 toa_noroom;
	__u64 toa_mtu;
	__u64 toa_error;
	__u64 mss_clamped;
	/* Pairs looked at by the pool walk (lib/fnat.h fnat_alloc), claimed
	 * or not: probes / allocated is the search's mean length. */
	__u64 probes;
	/* ICMP errors about the service's FULLNAT flows translated (lib/fnat.h):
	 * from the client's side to the real server, from the real server's
	 * side to the client; frag-needed / packet-too-big MTUs lowered by the
	 * TOA's length (toward the client, while the flow's TOA is armed). */
	__u64 icmp_to_rs;
	__u64 icmp_to_client;
	__u64 icmp_mtu_lowered;
};

/* fnat_missed: PERCPU_ARRAY[0], packets passed to the kernel because the
 * tail call into xdp_fnat failed (fnat_prog empty). */

/* ---- QUIC-LB (draft-ietf-quic-load-balancers-21) ---- */
/* Configurations per service: one per config rotation codepoint 0..6 (7 is
 * the draft's reserved "no configuration" codepoint). */
#define RVS_QUIC_CONFIGS 7
/* Longest server ID (octets) and longest DCID a v1/v2 header carries. */
#define RVS_QUIC_SID_MAX 15
#define RVS_QUIC_DCID_MAX 20
/* QUIC version 2 (RFC 9369); version 1 is 1. */
#define RVS_QUIC_VERSION_2 0x6b3343cfu
/* Services with QUIC-LB configurations (quic_lb entries) and server IDs
 * of all services (quic_sids entries). */
#define RVS_QUIC_SVCS_MAX 1024
#define RVS_QUIC_SIDS_MAX 65536
/* xdp_dsr_opt's index in the prog array dsr_prog. */
#define RVS_DSR_PROG 0
/* xdp_quic's index in the prog array quic_prog. */
#define RVS_QUIC_PROG 0
/* rvs_quic_cfg.mode: how a codepoint's CIDs are decoded here. */
#define RVS_QUIC_MODE_NONE 0   /* no configuration at this codepoint */
#define RVS_QUIC_MODE_PLAIN 1  /* server ID in clear: CID octets 1..1+sid_len */
#define RVS_QUIC_MODE_SINGLE 2 /* single-pass AES-128-ECB (sid_len + nonce_len == 16) */
/* Four-pass (the other keyed lengths): not decoded by the XDP program; its
 * CIDs are undecodable here and routed by the fallback hash. */
#define RVS_QUIC_MODE_FOUR 3
/* The fallback's hash of the DCID (up to RVS_QUIC_DCID_MAX octets, zero
 * padded to three little-endian 64-bit words w0..w2, n its length): h =
 * ((w0 ^ SEED ^ n) * MUL); then for w1, w2 h = ((h ^ (h >> 32) ^ wi) * MUL);
 * h ^= h >> 32; the low 32 bits (rvs_xdp::quic_lb::dcid_hash agrees). */
#define RVS_QUIC_HASH_SEED 0x5256535f7175696cull

/* One QUIC-LB configuration as the program decodes it. */
struct rvs_quic_cfg {
	__u8 mode;      /* RVS_QUIC_MODE_* */
	__u8 sid_len;   /* server ID octets (1..15) */
	__u8 nonce_len; /* nonce octets (4..18) */
	__u8 pad0;
	/* RVS_QUIC_MODE_SINGLE: the AES-128 decryption round keys of the
	 * equivalent inverse cipher (FIPS-197 5.3.5), 11 rounds of four
	 * big-endian column words, written by the plane from the key. */
	__u32 dk[44];
};

/* quic_lb: HASH[service index] (the services of quic_services). */
struct rvs_quic_svc {
	/* Short-header DCID length assumed when the first DCID octet names a
	 * codepoint without configuration (the CID length of the service's
	 * lowest-numbered configuration, as rvs-quiclb's Router does). */
	__u8 fallback_len;
	__u8 pad0[3];
	struct rvs_quic_cfg cfg[RVS_QUIC_CONFIGS];
};

/* quic_sids: HASH, (service, server ID) -> real-server index. */
struct rvs_quic_sid_key {
	__u32 svc;
	__u8 len; /* server ID octets */
	__u8 sid[RVS_QUIC_SID_MAX]; /* the rest zero */
};

/* quic_stats: PERCPU_ARRAY[service index], QUIC-LB routing counters. */
struct rvs_quic_stats {
	__u64 by_cid;      /* routed to the real server its CID's server ID names */
	__u64 by_fallback; /* a QUIC header that parsed, routed by the DCID hash
			    * (no config at its codepoint, a DCID too short for
			    * its config, four-pass, a server ID with no live
			    * real server) */
	__u64 undecodable; /* a header that did not parse (empty, truncated: not
			    * QUIC), forwarded by the hash of what is there */
};

#endif /* RVS_H */
