// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/hash.h: the kernel's hash_32, address folding and hsiphash (the
 * hashes the schedulers and the tunnel source port use). */
#ifndef RVS_LIB_HASH_H
#define RVS_LIB_HASH_H

#include "lib/common.h"

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

#endif /* RVS_LIB_HASH_H */
