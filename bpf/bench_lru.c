// SPDX-License-Identifier: MIT OR Apache-2.0
/* Benchmark floors, with the director's IPv4 flow table: an LRU hash of
 * the same key and value types (rvs_flow4_key, 16 bytes; rvs_flow) and the
 * same size, so the kernel hashes and compares as many bytes as for the
 * director's lookups.
 * Default build (bench_lru.o), the new-flow floor: read the IPv4/TCP 5-tuple
 * at fixed offsets (no checks beyond the frame's length) and insert it, with
 * a key made unique per run (a per-CPU counter in the client address and
 * port), so every run is an insert (evicting once full).
 * With -DBENCH_LRU_HIT (bench_lru_hit.o), the established-flow floor: the
 * same parse and key, looked up (inserted on the first run only). What the
 * director does beyond it on that path: check the Ethernet type, the IP
 * version, options, fragmentation and the TCP flags, read its config, the
 * flow's timeout and its real server, count the packet for the service and
 * the real server, and rewrite the MAC addresses.
 * With -DBENCH_LRU_HIT -DRVS_BENCH_CYCLE_FLOWS (bench_lru_cycle.o), the
 * same floor over a working set of N flows: the client address is the next
 * key of the cycle (bench_cycle.h) on every run. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "lib/map.h"

#include "rvs.h"
#ifdef RVS_BENCH_CYCLE_FLOWS
#include "bench_cycle.h"
#endif

char LICENSE[] SEC("license") = "Dual MIT/GPL";

RVS_MAP(bench_flows, BPF_MAP_TYPE_LRU_HASH, RVS_FLOWS_DEFAULT,
	struct rvs_flow4_key, struct rvs_flow);

RVS_MAP(bench_seq, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, __u64);

SEC("xdp")
int bench_lru(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct tcphdr *th = (void *)(ip + 1);
	struct rvs_flow4_key k = {};
	struct rvs_flow v = {};
	__u32 zero = 0;
	__u64 *seq;

	if ((void *)(th + 1) > end)
		return XDP_PASS;
	__builtin_memcpy(k.caddr, &ip->saddr, 4);
	__builtin_memcpy(k.vaddr, &ip->daddr, 4);
#ifdef BENCH_LRU_HIT
#ifdef RVS_BENCH_CYCLE_FLOWS
	{
		long i = bench_cycle_next();

		if (i >= 0)
			*(__u32 *)k.caddr = bpf_htonl(RVS_BENCH_CYCLE_BASE + (__u32)i);
	}
#endif
	k.cport = th->source;
	k.vport = th->dest;
	k.proto = ip->protocol;
	if (bpf_map_lookup_elem(&bench_flows, &k))
		return XDP_TX;
	bpf_map_update_elem(&bench_flows, &k, &v, BPF_ANY);
	return XDP_TX;
#endif
	seq = bpf_map_lookup_elem(&bench_seq, &zero);
	if (!seq)
		return XDP_PASS;
	*seq += 1;
	/* Vary the client address and port: a new key every run. */
	*(__u32 *)k.caddr ^= (__u32)*seq;
	k.cport = th->source ^ (__u16)(*seq >> 32);
	k.vport = th->dest;
	k.proto = ip->protocol;
	v.last_seen = bpf_jiffies64();
	bpf_map_update_elem(&bench_flows, &k, &v, BPF_ANY);
	return XDP_TX;
}
