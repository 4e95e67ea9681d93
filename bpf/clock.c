// SPDX-License-Identifier: MIT OR Apache-2.0
/* Reads the kernel's jiffies counter for the loader, which calibrates HZ
 * (the director stores flow ages in jiffies: bpf_jiffies64 is a single load,
 * far cheaper per packet than a nanosecond clock). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "lib/map.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

RVS_MAP(clock_jiffies, BPF_MAP_TYPE_ARRAY, 1, __u32, __u64);

SEC("xdp")
int clock(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&clock_jiffies, &zero);

	if (v)
		*v = bpf_jiffies64();
	return XDP_PASS;
}
