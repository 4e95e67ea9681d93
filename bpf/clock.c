// SPDX-License-Identifier: MIT OR Apache-2.0
/* Reads the kernel's jiffies counter for the loader, which calibrates HZ
 * (the director stores flow ages in jiffies: bpf_jiffies64 is a single load,
 * far cheaper per packet than a nanosecond clock). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} clock_jiffies SEC(".maps");

SEC("xdp")
int clock(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&clock_jiffies, &zero);

	if (v)
		*v = bpf_jiffies64();
	return XDP_PASS;
}
