/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * toa.h: the types of the TOA reader (bpf/toa.c) and of the tests' TOA
 * writer (bpf/toa_test_writer.c). The Rust mirrors live in
 * crates/xdp/src/toa.rs.
 */
#ifndef RVS_TOA_H
#define RVS_TOA_H

#include <linux/types.h>

/* The address families of struct rvs_toa_addr (and of the socket
 * programs' contexts): the BPF programs include no libc header. */
#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* TOA: TCP option kind 254, IPv4 form 8 bytes, IPv6 form 20 bytes. */
#define RVS_TOA_KIND 254
#define RVS_TOA_LEN4 8
#define RVS_TOA_LEN6 20

/* The client address a connection's TOA carried (sk_storage value of the
 * reader; the writer's configuration). */
struct rvs_toa_addr {
	__u8 family;    /* AF_INET or AF_INET6; 0: none */
	__u8 pad0;
	__be16 port;    /* network order */
	__u8 addr[16];  /* network order; IPv4 in the first 4 bytes */
};

/* Indexes of the reader's `toa_stats` counters. */
#define RVS_TOA_FROM_ACK  0 /* TOA read from the ACK ending the handshake */
#define RVS_TOA_FROM_SYN  1 /* TOA read from the saved SYN */
#define RVS_TOA_NONE      2 /* passive connection without a TOA */
#define RVS_TOA_BAD       3 /* kind 254 of a bad length, malformed options */
#define RVS_TOA_MAPPED    4 /* IPv4 TOA returned v4-mapped on an IPv6 socket */
#define RVS_TOA_V6_ON_V4  5 /* IPv6 TOA on an IPv4 socket: not returned */
#define RVS_TOA_NSTATS    6

#endif
