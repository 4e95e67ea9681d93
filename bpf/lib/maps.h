// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/maps.h: every map of the director (names are ABI: the loader and the
 * tests find them by name) and the scratch layouts kept in maps. */
#ifndef RVS_LIB_MAPS_H
#define RVS_LIB_MAPS_H

#include "lib/common.h"

RVS_MAP(services, BPF_MAP_TYPE_HASH, RVS_MAX_SERVICES, struct rvs_svc_key, __u32);

RVS_MAP(svc_info, BPF_MAP_TYPE_ARRAY, RVS_MAX_SERVICES, __u32, struct rvs_svc);

RVS_MAP(slots, BPF_MAP_TYPE_ARRAY, RVS_SLOTS_DEFAULT, __u32, __u32);

RVS_MAP(dests, BPF_MAP_TYPE_ARRAY, RVS_MAX_DESTS, __u32, struct rvs_dest);

RVS_MAP(flows, BPF_MAP_TYPE_LRU_HASH, RVS_FLOWS_DEFAULT, struct rvs_flow_key, struct rvs_flow);

RVS_MAP(flows4, BPF_MAP_TYPE_LRU_HASH, RVS_FLOWS_DEFAULT, struct rvs_flow4_key, struct rvs_flow);

RVS_MAP(embryonic, BPF_MAP_TYPE_LRU_HASH, RVS_EMBRYONIC_DEFAULT, struct rvs_flow_key,
	struct rvs_flow);

RVS_MAP(embryonic4, BPF_MAP_TYPE_LRU_HASH, RVS_EMBRYONIC_DEFAULT, struct rvs_flow4_key,
	struct rvs_flow);

RVS_MAP(svc_flood, BPF_MAP_TYPE_PERCPU_ARRAY, RVS_MAX_SERVICES, __u32, struct rvs_svc_flood);

RVS_MAP(flow_cache, BPF_MAP_TYPE_PERCPU_ARRAY, RVS_FLOW_CACHE_SIZE, __u32, struct rvs_flow_cache);

RVS_MAP(flow6_cache, BPF_MAP_TYPE_PERCPU_ARRAY, RVS_FLOW6_CACHE_SIZE,
	__u32, struct rvs_flow6_cache);

RVS_MAP(flow_epochs, BPF_MAP_TYPE_ARRAY, RVS_FLOW_EPOCHS, __u32, __u32);

RVS_MAP(nat_rev, BPF_MAP_TYPE_LRU_HASH, RVS_FLOWS_DEFAULT, struct rvs_nat_key, struct rvs_nat);

RVS_MAP(persist, BPF_MAP_TYPE_LRU_HASH, RVS_FLOWS_DEFAULT,
	struct rvs_persist_key, struct rvs_persist);

RVS_MAP(rr_cursor, BPF_MAP_TYPE_ARRAY, RVS_MAX_SERVICES, __u32, __u64);

RVS_MAP(svc_stats, BPF_MAP_TYPE_PERCPU_ARRAY, RVS_MAX_SERVICES, __u32, struct rvs_stats);

RVS_MAP(dest_stats, BPF_MAP_TYPE_PERCPU_ARRAY, RVS_MAX_DESTS, __u32, struct rvs_stats);

RVS_MAP(config, BPF_MAP_TYPE_ARRAY, 1, __u32, struct rvs_config);

RVS_MAP(flood, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct rvs_flood);

RVS_MAP(embryonic_seen, BPF_MAP_TYPE_ARRAY, 1, __u32, __u64);

RVS_MAP(dest_conns, BPF_MAP_TYPE_ARRAY, RVS_MAX_DESTS, __u32, struct rvs_dest_conns);

RVS_MAP(locality, BPF_MAP_TYPE_LRU_HASH, RVS_LOCALITY_MAX,
	struct rvs_locality_key, struct rvs_locality);

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

RVS_MAP(locality_tmp, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct locality_scratch);

/* A global in a section of its own: the loader sees it as the one-element
 * array map ".data.own_macs"; the program reads it with plain loads (no
 * map lookup). */
struct rvs_own_macs own_macs SEC(".data.own_macs");

/* Unicast frames passed because they were sent to another host's MAC. */
RVS_MAP(foreign_frames, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, __u64);

/* Unresolved next hops for the control plane to resolve (rvs.h). */
RVS_MAP(nh_missing, BPF_MAP_TYPE_HASH, RVS_NH_MISSING_MAX, struct rvs_nh_key, __u32);

/* Next hops not reported because nh_missing was full. */
RVS_MAP(nh_missing_full, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, __u64);

/* FULLNAT (rvs.h): the tail-called program, its pools and translations. */
RVS_MAP(fnat_prog, BPF_MAP_TYPE_PROG_ARRAY, 1, __u32, __u32);

RVS_MAP(fnat_pools, BPF_MAP_TYPE_ARRAY, RVS_MAX_SERVICES, __u32, struct rvs_fnat_pool);

RVS_MAP(fnat_rev, BPF_MAP_TYPE_HASH, RVS_FLOWS_DEFAULT, struct rvs_fnat_key, struct rvs_fnat);

RVS_MAP(fnat_fwd, BPF_MAP_TYPE_HASH, RVS_FLOWS_DEFAULT, struct rvs_flow_key,
	struct rvs_fnat_key);

RVS_MAP(fnat_laddrs, BPF_MAP_TYPE_HASH, RVS_FNAT_LADDRS_MAX, struct rvs_nh_key, __u32);

RVS_MAP(fnat_tmp, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct rvs_fnat_tmp);

RVS_MAP(fnat_stats, BPF_MAP_TYPE_PERCPU_ARRAY, RVS_MAX_SERVICES, __u32, struct rvs_fnat_stats);

RVS_MAP(fnat_missed, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, __u64);
/* fnat_full: LRU_HASH, (real server, rport, proto, family; pad0 = the
 * service) -> jiffies of the last pool walk that found no free pair toward
 * that real server (lib/fnat.h fnat_alloc). */
RVS_MAP(fnat_full, BPF_MAP_TYPE_LRU_HASH, RVS_FNAT_FULL_MAX, struct rvs_fnat_key, __u64);
/* QUIC-LB (lib/quic_lb.h): per service its configurations, the server IDs
 * of its real servers, its counters. */
/* quic_services: like services, for the UDP services with QUIC-LB
 * configurations, which are not in services (xdp_lb looks here when
 * services has no entry, and hands the datagram to xdp_quic). */
RVS_MAP(quic_services, BPF_MAP_TYPE_HASH, RVS_QUIC_SVCS_MAX, struct rvs_svc_key, __u32);

RVS_MAP(quic_lb, BPF_MAP_TYPE_HASH, RVS_QUIC_SVCS_MAX, __u32, struct rvs_quic_svc);

RVS_MAP(quic_sids, BPF_MAP_TYPE_HASH, RVS_QUIC_SIDS_MAX, struct rvs_quic_sid_key, __u32);

RVS_MAP(quic_stats, BPF_MAP_TYPE_PERCPU_ARRAY, RVS_MAX_SERVICES, __u32, struct rvs_quic_stats);

/* Per-CPU room for quic_route's DCID and server-ID key, and the service
 * xdp_lb hands to xdp_quic. */
struct quic_scratch {
	__u8 dcid[24];  /* the DCID octets read (at most 20), zero after */
	__u8 plain[16]; /* CID octets 1..17 in plaintext */
	struct rvs_quic_sid_key k;
	__u8 hdr[8]; /* the first header octets */
	__u32 svc;   /* the service index, from xdp_lb */
	__u32 pad0;
};

RVS_MAP(quic_tmp, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct quic_scratch);

/* The QUIC-LB program xdp_quic at RVS_QUIC_PROG, tail-called by xdp_lb for
 * the datagrams of QUIC-LB services (its own stack and verifier budget);
 * datagrams passed because the slot was empty are counted in quic_missed. */
RVS_MAP(quic_prog, BPF_MAP_TYPE_PROG_ARRAY, 1, __u32, __u32);

RVS_MAP(quic_missed, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, __u64);

/* DSR by IP option (lib/dsr_opt.h): the program xdp_dsr_opt at
 * RVS_DSR_PROG, tail-called by forward() with the real server copied into
 * dsr_tmp (its own stack and verifier budget: the director has none to
 * spare). */
RVS_MAP(dsr_tmp, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct rvs_dest);

RVS_MAP(dsr_prog, BPF_MAP_TYPE_PROG_ARRAY, 1, __u32, __u32);

#endif /* RVS_LIB_MAPS_H */
