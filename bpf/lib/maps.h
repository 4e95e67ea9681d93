// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/maps.h: every map of the director (names are ABI: the loader and the
 * tests find them by name) and the scratch layouts kept in maps. */
#ifndef RVS_LIB_MAPS_H
#define RVS_LIB_MAPS_H

#include "lib/common.h"

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

/* A global in a section of its own: the loader sees it as the one-element
 * array map ".data.own_macs"; the program reads it with plain loads (no
 * map lookup). */
struct rvs_own_macs own_macs SEC(".data.own_macs");

/* Unicast frames passed because they were sent to another host's MAC. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} foreign_frames SEC(".maps");

#endif /* RVS_LIB_MAPS_H */
