/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * sock.h: the ONE definition of the socket-level data plane's map keys and
 * values and of its constants (bpf/sock_lb.c and crates/sock/src/maps.rs),
 * under the rules of rvs.h: fixed-width integers, every padding byte an
 * explicit field, addresses as 16 bytes in network order (IPv4 in the first
 * word), ports in network order. The Rust mirrors are checked against the
 * BTF of sock_lb.o by crates/xdp/tests/layout.rs, with the director's.
 */
#ifndef RVS_SOCK_H
#define RVS_SOCK_H

#include "rvs.h"

/* ---- capacities ---- */
#define RVS_SOCK_SVC_MAX 65536
#define RVS_SOCK_DEST_MAX 65536
#define RVS_SOCK_SLOTS (1u << 20)
#define RVS_SOCK_SOCKS_MAX 262144
#define RVS_SOCK_PERSIST_MAX 65536
/* The least-connection walk's bound (the control side caps a list here). */
#define RVS_SOCK_LIST_MAX 1024

/* ---- service flags ---- */
#define RVS_SOCK_SVC_F_FALLBACK 0x1 /* sh-fallback / mh-fallback */
#define RVS_SOCK_SVC_F_PORT 0x2     /* sh-port / mh-port */
/* Client source ranges (Kubernetes' loadBalancerSourceRanges): a socket
 * bound to a source connects only when `sock_src_ranges` holds a range of
 * the service around it; an unbound one when the service also has
 * RVS_SOCK_SVC_F_NODE_OK (the source the kernel picks by route toward the
 * VIP is in a range, as the control side found). Anything else: EPERM. */
#define RVS_SOCK_SVC_F_SRC_RANGES 0x4
#define RVS_SOCK_SVC_F_NODE_OK 0x8

/* ---- real-server flags ---- */
#define RVS_SOCK_DEST_F_PRESENT 0x1 /* in its service (cleared when deleted) */

/* ---- per-CPU event counters (`sock_counters` indexes) ---- */
#define RVS_SOCK_CNT_TCP 0      /* TCP sockets given a real server (connect) */
#define RVS_SOCK_CNT_UDP 1      /* UDP sockets given a real server (a new session) */
#define RVS_SOCK_CNT_UDP_KEPT 2 /* UDP sends to a VIP that kept the socket's server */
#define RVS_SOCK_CNT_NO_DEST 3  /* connect/sendmsg to a VIP refused: no real server */
#define RVS_SOCK_CNT_REFUSED_SRC 4 /* refused: the source is outside the ranges */
#define RVS_SOCK_CNT_MAX 5

/* `sock_src_ranges` (LPM trie, RVS_SRC_RANGES_MAX entries, value a __u8
 * 1) is keyed by the director's struct rvs_src_key (rvs.h): prefixlen = 32
 * + the range's, `svc` the service's `id` below, then the address. */

/* `sock_services` key: a virtual service. */
struct rvs_sock_svc_key {
	__u32 addr[4]; /* network order; IPv4 in addr[0], the rest zero */
	__u16 port;    /* network order */
	__u8 proto;    /* IPPROTO_TCP / IPPROTO_UDP */
	__u8 family;   /* RVS_AF_INET / RVS_AF_INET6 */
};

/* `sock_services` value. */
struct rvs_sock_svc {
	__u32 id; /* index into `sock_cursor` and the persistence key */
	__u32 sched; /* RVS_SCHED_* (rvs.h; rr, wrr, lc, wlc, sed, nq, sh, dh, mh) */
	__u32 flags; /* RVS_SOCK_SVC_F_* */
	__u32 list_off; /* schedulable real servers (dest indexes) in `slots` */
	__u32 list_len;
	__u32 table_off; /* sh/dh/mh table or wrr cycle in `slots` */
	__u32 table_len;
	__u32 persist_secs; /* 0: not persistent */
};

/* `sock_dests` value: one real server. */
struct rvs_sock_dest {
	__u32 addr[4];
	__u16 port;
	__u8 family;
	__u8 flags; /* RVS_SOCK_DEST_F_* */
	__u32 weight;
};

/* `sock_stats` value: one real server's sockets. */
struct rvs_sock_dest_stats {
	__u64 active; /* open sockets connected to it */
	__u64 total;  /* sockets ever scheduled to it */
};

/* `sock_socks` value (by socket cookie): what a socket was given (for
 * sock_release, a later sendmsg, -Lcn and the destruction of connected UDP
 * sockets whose real server was deleted). `client` is the socket's own
 * address once it has one (TCP: at the SYN, sock_ops; UDP: at its first
 * recvmsg); client_port 0 until then. */
struct rvs_sock_rec {
	struct rvs_sock_svc_key vip;
	__u32 dest;
	__u32 client[4];
	__u16 client_port; /* network order */
	__u16 pad;
};

/* `sock_persist` key: a client (bound source address) of a service. */
struct rvs_sock_persist_key {
	__u32 svc;
	__u32 client[4];
};

/* `sock_persist` value: the real server a client keeps. */
struct rvs_sock_persist {
	__u32 dest;
	__u32 pad;
	__u64 expires_ns;
};

#endif /* RVS_SOCK_H */
