// SPDX-License-Identifier: MIT OR Apache-2.0
/* Benchmark floor: the cheapest useful XDP program, swap nothing, XDP_TX. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

SEC("xdp")
int bench_tx(struct xdp_md *ctx)
{
	return XDP_TX;
}
