// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/quic_lb.h: QUIC-LB routing (draft-ietf-quic-load-balancers-21) of the
 * datagrams of a UDP service with QUIC-LB configurations (in quic_services
 * rather than services; xdp_lb tail-calls the program xdp_quic for them,
 * which has its own stack and verifier budget): the real server is
 * named by the server ID its own server encoded into the QUIC Destination
 * Connection ID, so a client that migrates (new address or port: a new
 * 4-tuple) keeps reaching the server that holds its connection.
 *
 * Flow-table interplay: QUIC-LB routing is per PACKET. Such a service's
 * datagrams never get a flow entry (nor a flow-cache entry, a persistence
 * template or a dest_conns count): a flow entry names the real server of a
 * 4-tuple, which is exactly what a migration changes, and routing by it
 * would also keep an old 4-tuple's choice after the CID has moved on. The
 * cost: every datagram pays the flow-cache probe and the flows4 (flows)
 * lookup that misses, the services lookups that miss, the quic_services
 * lookup, the tail call, a second parse, the quic_lb lookup, the DCID
 * decode (plaintext: nothing; single-pass: one AES-128 block decryption,
 * T-tables in .rodata) and the quic_sids lookup. Flow entries made for the
 * same 4-tuple before the service became a QUIC-LB one win until they
 * expire (the flow table is looked up first). Every other packet that
 * finds no service (traffic for the director itself) pays one more hash
 * lookup (quic_services) before it is passed. Exact-port services only (a
 * port-zero QUIC-LB service is not looked up).
 *
 * Decoding (what rvs-quiclb's Router does, with the differences noted):
 *  - long header (first bit set): the DCID length is the header's sixth
 *    octet (any version: the invariant layout, RFC 8999);
 *  - short header: the DCID length is the CID length of the configuration
 *    at the codepoint of the first DCID octet (its top three bits), or the
 *    service's fallback_len when there is none;
 *  - the codepoint's configuration decodes the DCID when it has at least
 *    the configuration's CID length: plaintext (server ID = CID octets
 *    1..1+sid_len) or single-pass AES-128-ECB (octets 1..17 decrypted);
 *    four-pass configurations are not decoded here (their DCIDs count as
 *    undecodable and go by the fallback; the proxy plane decodes them);
 *  - the server ID is looked up in quic_sids; a real server that exists and
 *    is not deleted takes the packet, even quiesced (weight 0) or over its
 *    threshold: its connections live there.
 * Everything else (a codepoint without configuration, a DCID too short for
 * its configuration, four-pass, a truncated or empty header, a datagram
 * that is not QUIC at all, a server ID with no live real server) is routed
 * by the fallback: a hash of the DCID octets present (at most 20) over the
 * service's bucket table (mh/sh/dh, wrr's sequence) or else its real-server
 * list, stepping over ineligible servers; the same DCID gives the same real
 * server as long as the service's servers do not change, so a client's
 * Initial packets (client-chosen DCID) and its 0-RTT packets agree.
 *
 * Counters (quic_stats), with the proxy plane's meaning: by_cid, routed by
 * the server ID; by_fallback, a QUIC header that parsed, routed by the hash;
 * undecodable, a header that did not parse (empty, truncated: rvs-quiclb's
 * header::parse fails). A long header parses with its DCID, SCID length and
 * SCID present (at most 20 octets each for v1/v2); a short header with as
 * many DCID octets as its codepoint's configuration says, or whatever
 * follows when its codepoint has none. Every datagram counts in exactly
 * one. The proxy drops undecodable datagrams; this program still forwards
 * them by the hash of the DCID octets present (the real server's QUIC
 * stack discards them; XDP_PASS would hand them to the director's own
 * stack, which has no use for them either). */
#ifndef RVS_LIB_QUIC_LB_H
#define RVS_LIB_QUIC_LB_H

#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/sched.h"
#include "lib/stats.h"
#include "lib/forward.h"
#include "lib/nat.h"
#include "lib/aes_tables.h"

/* ---------------------------------------------------------- AES-128 */

#define AES_TD(k, x) rvs_aes_td[k][(x) & 0xff]

/* One inverse round of the equivalent inverse cipher (FIPS-197 5.3.5):
 * InvSubBytes, InvShiftRows and InvMixColumns by T-table, then the round
 * key (dk already holds InvMixColumns of the encryption round keys). */
#define AES_INV_ROUND(r)                                                               \
	do {                                                                           \
		t0 = AES_TD(0, s0 >> 24) ^ AES_TD(1, s3 >> 16) ^ AES_TD(2, s2 >> 8) ^      \
		     AES_TD(3, s1) ^ dk[4 * (r)];                                          \
		t1 = AES_TD(0, s1 >> 24) ^ AES_TD(1, s0 >> 16) ^ AES_TD(2, s3 >> 8) ^      \
		     AES_TD(3, s2) ^ dk[4 * (r) + 1];                                      \
		t2 = AES_TD(0, s2 >> 24) ^ AES_TD(1, s1 >> 16) ^ AES_TD(2, s0 >> 8) ^      \
		     AES_TD(3, s3) ^ dk[4 * (r) + 2];                                      \
		t3 = AES_TD(0, s3 >> 24) ^ AES_TD(1, s2 >> 16) ^ AES_TD(2, s1 >> 8) ^      \
		     AES_TD(3, s0) ^ dk[4 * (r) + 3];                                      \
		s0 = t0;                                                               \
		s1 = t1;                                                               \
		s2 = t2;                                                               \
		s3 = t3;                                                               \
	} while (0)

#define AES_ISB(x) ((__u32)rvs_aes_isbox[(x) & 0xff])

/* The last round's column c (no InvMixColumns). */
#define AES_LAST(a, b, c, d, k)                                                        \
	((AES_ISB((a) >> 24) << 24) ^ (AES_ISB((b) >> 16) << 16) ^ (AES_ISB((c) >> 8) << 8) ^ \
	 AES_ISB(d) ^ (k))

static __always_inline __u32 be32_at(const __u8 *b)
{
	return ((__u32)b[0] << 24) | ((__u32)b[1] << 16) | ((__u32)b[2] << 8) | b[3];
}

static __always_inline void be32_put(__u8 *b, __u32 v)
{
	b[0] = v >> 24;
	b[1] = v >> 16;
	b[2] = v >> 8;
	b[3] = v;
}

/* AES-128 decryption of the 16 octets at `in` into `out` with the
 * decryption round keys `dk` (rvs_quic_cfg.dk). */
static __always_inline void aes128_decrypt(const __u32 *dk, const __u8 *in, __u8 *out)
{
	__u32 s0, s1, s2, s3, t0, t1, t2, t3;

	s0 = be32_at(in) ^ dk[0];
	s1 = be32_at(in + 4) ^ dk[1];
	s2 = be32_at(in + 8) ^ dk[2];
	s3 = be32_at(in + 12) ^ dk[3];
	AES_INV_ROUND(1);
	AES_INV_ROUND(2);
	AES_INV_ROUND(3);
	AES_INV_ROUND(4);
	AES_INV_ROUND(5);
	AES_INV_ROUND(6);
	AES_INV_ROUND(7);
	AES_INV_ROUND(8);
	AES_INV_ROUND(9);
	be32_put(out, AES_LAST(s0, s3, s2, s1, dk[40]));
	be32_put(out + 4, AES_LAST(s1, s0, s3, s2, dk[41]));
	be32_put(out + 8, AES_LAST(s2, s1, s0, s3, dk[42]));
	be32_put(out + 12, AES_LAST(s3, s2, s1, s0, dk[43]));
}

/* ------------------------------------------------------------ routing */

/* The DCID hash of RVS_QUIC_HASH_SEED (rvs.h): `d` holds 24 octets, those
 * from `n` on zero. */
static __always_inline __u32 quic_dcid_hash(const __u8 *d, __u32 n)
{
	__u64 w0, w1, w2, h;

	__builtin_memcpy(&w0, d, 8);
	__builtin_memcpy(&w1, d + 8, 8);
	__builtin_memcpy(&w2, d + 16, 8);
	h = (w0 ^ RVS_QUIC_HASH_SEED ^ n) * RVS_FLOW_CACHE_MUL;
	h = (h ^ (h >> 32) ^ w1) * RVS_FLOW_CACHE_MUL;
	h = (h ^ (h >> 32) ^ w2) * RVS_FLOW_CACHE_MUL;
	h ^= h >> 32;
	return (__u32)h;
}

/* The fallback: hash `h` over the bucket table (if the service has one)
 * or the real-server list, stepping over ineligible servers (at most
 * RVS_MAX_SVC_DESTS of them). */
static __always_inline __u32 quic_fallback(const struct rvs_svc *s, __u32 h)
{
	struct walk x = { .start = h, .result = RVS_SLOT_EMPTY };
	__u32 idx;

	if (s->table_len) {
		x.off = s->table_off;
		x.len = s->table_len;
	} else {
		x.off = s->dests_off;
		x.len = s->dests_len;
	}
	if (x.len == 0)
		return RVS_SLOT_EMPTY;
	idx = slot_at(x.off + h % x.len);
	if (eligible(idx))
		return idx;
	bpf_loop(x.len < RVS_MAX_SVC_DESTS ? x.len : RVS_MAX_SVC_DESTS, walk_step, &x, 0);
	CALL_SITE_TAG(40);
	return x.result;
}

/* The real server for the QUIC datagram whose UDP payload starts at `q`
 * (an offset from the frame's start) of service `svc_idx`, RVS_SLOT_EMPTY
 * for none; counted in quic_stats. A function of its own (not inlined): its
 * stack is not added to the forwarding path's deepest call chain (the
 * tunnel encapsulation). */
static __noinline __u32 quic_route(struct xdp_md *ctx, const struct rvs_svc *svc, __u32 svc_idx,
				   __u32 q)
{
	__u32 zero = 0, total, off = 0, dlen = 0, n = 0, rot, i, idx;
	const struct rvs_quic_cfg *c;
	struct rvs_quic_stats *st;
	struct rvs_quic_svc *qs;
	struct quic_scratch *t;
	struct rvs_dest *d;
	__u32 *dp;
	/* The header parsed as rvs-quiclb's Router parses it (header::parse):
	 * what the proxy plane calls QUIC; the rest counts `undecodable`. */
	int parsed = 0;
	__u32 version, slen;

	t = bpf_map_lookup_elem(&quic_tmp, &zero);
	if (!t)
		return RVS_SLOT_EMPTY;
	__builtin_memset(t, 0, offsetof(struct quic_scratch, svc));
	qs = bpf_map_lookup_elem(&quic_lb, &svc_idx);
	CALL_SITE_TAG(41);
	st = bpf_map_lookup_elem(&quic_stats, &svc_idx);
	CALL_SITE_TAG(42);
	total = (__u32)(ctx->data_end - ctx->data);

	if (q < total && bpf_xdp_load_bytes(ctx, q, t->hdr, 1) == 0) {
		if (t->hdr[0] & 0x80) {
			/* Long header: first octet, version, DCID length; it
			 * parses when the DCID, the SCID length and the SCID
			 * are all there (at most 20 octets each for v1/v2). */
			off = q + 6;
			if (off <= total && bpf_xdp_load_bytes(ctx, q, t->hdr, 6) == 0) {
				dlen = t->hdr[5];
				version = be32_at(t->hdr + 1);
				if (!((version == 1 || version == RVS_QUIC_VERSION_2) &&
				      dlen > RVS_QUIC_DCID_MAX) &&
				    off + dlen < total &&
				    bpf_xdp_load_bytes(ctx, off + (dlen & 0xff), t->hdr + 6, 1) == 0) {
					slen = t->hdr[6];
					parsed = !((version == 1 || version == RVS_QUIC_VERSION_2) &&
						   slen > RVS_QUIC_DCID_MAX) &&
						 off + dlen + 1 + slen <= total;
				}
			}
		} else {
			/* Short header: the length from the configuration its
			 * first DCID octet names (it parses when that many
			 * octets follow), else the fallback length over what
			 * is there (it parses). */
			off = q + 1;
			if (off >= total) {
				parsed = 1;
			} else if (qs && bpf_xdp_load_bytes(ctx, off, t->hdr + 1, 1) == 0) {
				rot = t->hdr[1] >> 5;
				dlen = qs->fallback_len;
				parsed = 1;
				barrier_var(rot);
				if (rot < RVS_QUIC_CONFIGS && qs->cfg[rot].mode != RVS_QUIC_MODE_NONE) {
					dlen = 1 + qs->cfg[rot].sid_len + qs->cfg[rot].nonce_len;
					parsed = off + dlen <= total;
				}
			}
		}
		n = dlen < RVS_QUIC_DCID_MAX ? dlen : RVS_QUIC_DCID_MAX;
		if (off >= total)
			n = 0;
		else if (n > total - off)
			n = total - off;
		if (n >= 1 && n <= RVS_QUIC_DCID_MAX) {
			/* 1..RVS_QUIC_DCID_MAX as the verifier sees it: clang
			 * folds the test above into one unsigned compare of
			 * n - 1, and a 6.1 verifier then refuses a load_bytes
			 * size whose minimum is 0. */
			__u32 m = n - 1;

			barrier_var(m);
			if (m >= RVS_QUIC_DCID_MAX ||
			    bpf_xdp_load_bytes(ctx, off, t->dcid, m + 1))
				n = 0;
		} else {
			n = 0;
		}
	}

	if (qs && n >= 1) {
		rot = t->dcid[0] >> 5;
		/* Else clang, knowing rot <= 7, tests rot == 7, from which a
		 * 6.1 verifier learns no bound for the index below. */
		barrier_var(rot);
		if (rot >= RVS_QUIC_CONFIGS)
			goto fallback;
		c = &qs->cfg[rot];
		if (c->sid_len < 1 || c->sid_len > RVS_QUIC_SID_MAX ||
		    n < 1u + c->sid_len + c->nonce_len)
			goto fallback;
		if (c->mode == RVS_QUIC_MODE_PLAIN) {
			__builtin_memcpy(t->plain, t->dcid + 1, 16);
		} else if (c->mode == RVS_QUIC_MODE_SINGLE && c->sid_len + c->nonce_len == 16) {
			aes128_decrypt(c->dk, t->dcid + 1, t->plain);
		} else {
			goto fallback;
		}
		t->k.svc = svc_idx;
		t->k.len = c->sid_len;
#pragma unroll
		for (i = 0; i < RVS_QUIC_SID_MAX; i++)
			t->k.sid[i] = i < c->sid_len ? t->plain[i] : 0;
		dp = bpf_map_lookup_elem(&quic_sids, &t->k);
		CALL_SITE_TAG(43);
		if (!dp)
			goto fallback;
		idx = *dp;
		d = bpf_map_lookup_elem(&dests, &idx);
		CALL_SITE_TAG(44);
		if (!d || (d->flags & RVS_DEST_F_UNAVAILABLE))
			goto fallback;
		if (st)
			st->by_cid++;
		return idx;
	}

fallback:
	if (st) {
		if (parsed)
			st->by_fallback++;
		else
			st->undecodable++;
	}
	return quic_fallback(svc, quic_dcid_hash(t->dcid, n));
}

/* ------------------------------------------------------- in xdp_lb */

/* Hand a datagram of QUIC-LB service `svc_idx` to xdp_quic; returns only
 * when the tail call failed (quic_prog empty): the datagram is passed and
 * counted in quic_missed. */
static __always_inline int quic_enter(struct xdp_md *ctx, __u32 svc_idx)
{
	__u32 zero = 0;
	struct quic_scratch *t = bpf_map_lookup_elem(&quic_tmp, &zero);
	__u64 *missed;

	if (!t)
		return XDP_PASS;
	t->svc = svc_idx;
	bpf_tail_call(ctx, &quic_prog, RVS_QUIC_PROG);
	missed = bpf_map_lookup_elem(&quic_missed, &zero);
	if (missed)
		*missed += 1;
	return XDP_PASS;
}

/* ------------------------------------------------------- in xdp_quic */

/* The body of xdp_quic (xdp_lb.c): parse the datagram handed over by
 * quic_enter (service index in quic_tmp), route it by connection ID
 * (quic_route) and forward it by the real server's method, without a flow
 * entry. */
static __always_inline int quic_main(struct xdp_md *ctx)
{
	struct pkt p = {};
	struct quic_scratch *t;
	struct rvs_config *cfg;
	struct rvs_svc *svc;
	struct rvs_dest *d;
	__u32 zero = 0, svc_idx, dest_idx;

	if (parse(ctx, &p) || p.icmp || p.proto != IPPROTO_UDP)
		return XDP_PASS;
	cfg = bpf_map_lookup_elem(&config, &zero);
	t = bpf_map_lookup_elem(&quic_tmp, &zero);
	if (!cfg || !t)
		return XDP_PASS;
	svc_idx = t->svc;
	svc = bpf_map_lookup_elem(&svc_info, &svc_idx);
	CALL_SITE_TAG(45);
	if (!svc || svc->sched == RVS_SCHED_NONE)
		return XDP_PASS;
	dest_idx = quic_route(ctx, svc, svc_idx, p.l4off + sizeof(struct udphdr));
	if (dest_idx == RVS_SLOT_EMPTY)
		return XDP_PASS;
	d = bpf_map_lookup_elem(&dests, &dest_idx);
	if (!d)
		return XDP_PASS;
	/* NAT: the reply entry of this 4-tuple (a migrated client's new one
	 * included), refreshed by every datagram. */
	if (d->method == RVS_FWD_NAT)
		nat_rev_add(&p, d, svc_idx, dest_idx);
	count(&svc_stats, svc_idx, p.l3len, 0, 0);
	count(&dest_stats, dest_idx, p.l3len, 0, 0);
	return forward(ctx, &p, d, cfg);
}

#endif /* RVS_LIB_QUIC_LB_H */
