// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/map.h: RVS_MAP, the one form every program here defines its maps in
 * (the director's lib/maps.h, the decapsulator, the clock and the benchmark
 * programs). Include it after <bpf/bpf_helpers.h>. */
#ifndef RVS_LIB_MAP_H
#define RVS_LIB_MAP_H

/* A BTF-defined map (libbpf's struct of __uint/__type members, the type and
 * the name the loader and the tests find it by): `entries` elements of
 * `map_type`, from `key_type` to `value_type`. */
#define RVS_MAP(name, map_type, entries, key_type, value_type)                     \
	struct {                                                                   \
		__uint(type, map_type);                                            \
		__uint(max_entries, entries);                                      \
		__type(key, key_type);                                             \
		__type(value, value_type);                                         \
	} name SEC(".maps")

#endif /* RVS_LIB_MAP_H */
