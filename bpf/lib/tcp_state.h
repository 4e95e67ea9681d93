// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/tcp_state.h: IPVS's TCP state table (tcp_states), active/inactive
 * connection counts, timeouts and the SYN-flood guard. */
#ifndef RVS_LIB_TCP_STATE_H
#define RVS_LIB_TCP_STATE_H

#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/flow.h"

/* ------------------------------------------------------ TCP state machine */

#define sNO RVS_TCP_S_NONE
#define sES RVS_TCP_S_ESTABLISHED
#define sSS RVS_TCP_S_SYN_SENT
#define sSR RVS_TCP_S_SYN_RECV
#define sFW RVS_TCP_S_FIN_WAIT
#define sTW RVS_TCP_S_TIME_WAIT
#define sCL RVS_TCP_S_CLOSE
#define sCW RVS_TCP_S_CLOSE_WAIT
#define sLA RVS_TCP_S_LAST_ACK
#define sLI RVS_TCP_S_LISTEN
#define sSA RVS_TCP_S_SYNACK

/* [direction][flag row][state]: direction 0 = INPUT (NAT, a reply was seen),
 * 1 = OUTPUT (NAT replies), 2 = INPUT_ONLY (DR/TUN, NAT before a reply);
 * rows syn, fin, ack, rst. The tables of IPVS's ip_vs_proto_tcp.c. */
static const __u8 tcp_states[3][4][RVS_TCP_S_LAST] = {
	{
		/*        NO   ES   SS   SR   FW   TW   CL   CW   LA   LI   SA */
		/*syn*/ { sSR, sES, sES, sSR, sSR, sSR, sSR, sSR, sSR, sSR, sSR },
		/*fin*/ { sCL, sCW, sSS, sTW, sTW, sTW, sCL, sCW, sLA, sLI, sTW },
		/*ack*/ { sES, sES, sSS, sES, sFW, sTW, sCL, sCW, sCL, sLI, sES },
		/*rst*/ { sCL, sCL, sCL, sSR, sCL, sCL, sCL, sCL, sLA, sLI, sSR },
	},
	{
		/*syn*/ { sSS, sES, sSS, sSR, sSS, sSS, sSS, sSS, sSS, sLI, sSR },
		/*fin*/ { sTW, sFW, sSS, sTW, sFW, sTW, sCL, sTW, sLA, sLI, sTW },
		/*ack*/ { sES, sES, sSS, sES, sFW, sTW, sCL, sCW, sLA, sES, sES },
		/*rst*/ { sCL, sCL, sSS, sCL, sCL, sTW, sCL, sCL, sCL, sCL, sCL },
	},
	{
		/*syn*/ { sSR, sES, sES, sSR, sSR, sSR, sSR, sSR, sSR, sSR, sSR },
		/*fin*/ { sCL, sFW, sSS, sTW, sFW, sTW, sCL, sCW, sLA, sLI, sTW },
		/*ack*/ { sES, sES, sSS, sES, sFW, sTW, sCL, sCW, sCL, sLI, sES },
		/*rst*/ { sCL, sCL, sCL, sSR, sCL, sCL, sCL, sCL, sLA, sLI, sCL },
	},
};

#define DIR_INPUT 0
#define DIR_OUTPUT 1
#define DIR_INPUT_ONLY 2

/* IPVS's set_tcp_state: RST first, then SYN, FIN, ACK; none of them = CLOSE. */
static __always_inline __u8 tcp_next_state(__u8 state, __u8 flags, __u32 dir)
{
	__u32 row;

	if (flags & TCPF_RST)
		row = 3;
	else if (flags & TCPF_SYN)
		row = 0;
	else if (flags & TCPF_FIN)
		row = 1;
	else if (flags & TCPF_ACK)
		row = 2;
	else
		return RVS_TCP_S_CLOSE;
	if (state >= RVS_TCP_S_LAST || dir > 2)
		return RVS_TCP_S_CLOSE;
	return tcp_states[dir][row][state];
}

/* IPVS's tcp_state_active_table: which states count as ActiveConn. */
static __always_inline int state_active(__u8 proto, __u8 state)
{
	return proto == IPPROTO_TCP &&
	       (state == RVS_TCP_S_ESTABLISHED || state == RVS_TCP_S_SYN_SENT ||
		state == RVS_TCP_S_SYN_RECV || state == RVS_TCP_S_SYNACK);
}

/* Add `delta` (+1/-1) to dest `idx`'s active or inactive counter. */
static __always_inline void conns_add(__u32 idx, int active, int delta)
{
	struct rvs_dest_conns *c = bpf_map_lookup_elem(&dest_conns, &idx);

	if (!c)
		return;
	if (active)
		__sync_fetch_and_add(&c->active, delta);
	else
		__sync_fetch_and_add(&c->inactive, delta);
}

/* A flow of dest `idx` went from state `from` to `to`. */
static __always_inline void conns_move(__u32 idx, __u8 proto, __u8 from, __u8 to)
{
	int a = state_active(proto, from), b = state_active(proto, to);

	if (a != b) {
		conns_add(idx, a, -1);
		conns_add(idx, b, 1);
	}
}

/* The flow's timeout in jiffies. */
static __always_inline __u64 flow_timeout(const struct rvs_config *cfg, const struct rvs_flow *f,
					  __u8 proto)
{
	__u32 s = f->state;

	if (proto != IPPROTO_TCP)
		return (__u64)cfg->udp_timeout * cfg->hz;
	if (s >= RVS_TCP_S_LAST)
		return 0;
	return (__u64)cfg->tcp_timeouts[s] * cfg->hz;
}

/* The embryonic tables may hold a live entry: one was written (inserted,
 * or a packet of its flow found it) no longer ago than the longest TCP
 * timeout, plus a second (embryonic_seen, rvs.h). Otherwise every entry
 * there counts as absent (expired) and a lookup could only miss: a SYN or
 * later packet of a flow not in the flow table skips it (while the tables
 * were not armed for that long, the common case). Whether this CPU is
 * armed does not say: an entry made on another CPU (or before arming ended)
 * is found until it expires. */
static __always_inline int embryo_maybe_live(const struct rvs_config *cfg, __u64 now)
{
	__u32 zero = 0, i, longest = 0;
	__u64 *seen, t;

	if (!cfg->hz)
		return 1;
	seen = bpf_map_lookup_elem(&embryonic_seen, &zero);
	if (!seen)
		return 1;
	t = *seen;
	if (t == RVS_EMBRYONIC_SEEN_UNKNOWN) {
		*seen = now;
		return 1;
	}
	if (!t)
		return 0;
	if (t >= now)
		return 1;
#pragma unroll
	for (i = 0; i < RVS_TCP_S_LAST; i++)
		if (cfg->tcp_timeouts[i] > longest)
			longest = cfg->tcp_timeouts[i];
	return now - t <= ((__u64)longest + 1) * cfg->hz;
}

/* An embryonic entry's last_seen was written with `now`: stamp
 * embryonic_seen (one store per jiffy at most, the line shared by every
 * CPU only while embryonic entries are being written). */
static __always_inline void embryo_touch(__u64 now)
{
	__u32 zero = 0;
	__u64 *seen = bpf_map_lookup_elem(&embryonic_seen, &zero);

	if (seen && *seen != now)
		*seen = now;
}

/* flood_note's answer (bits). */
#define FLOOD_OVER 1  /* above max_new_flows this second: the guard */
#define FLOOD_ARMED 2 /* new TCP flows start in the embryonic tables */

/* Count a new flow on this CPU (one per-CPU array element, no atomics) and
 * say what the SYN-flood defences do with it: FLOOD_OVER when this second's
 * count is above the configured max_new_flows (a SYN flood: stop paying for
 * flow-table inserts), armed too; FLOOD_ARMED when this second's half-open
 * new flows (count less the handshakes completed, flood_completed) are above
 * RVS_EMBRYONIC_ARM_RATE without max_new_flows, or the tables were armed in
 * the last RVS_EMBRYONIC_ARM_SECS seconds (rvs.h, struct rvs_flood).
 * Without the kernel's HZ nothing is counted: always armed. */
static __always_inline int flood_note(const struct rvs_config *cfg, __u64 now)
{
	__u32 zero = 0, limit = cfg->max_new_flows, open;
	struct rvs_flood *st;
	__u64 sec;

	if (!cfg->hz)
		return FLOOD_ARMED;
	st = bpf_map_lookup_elem(&flood, &zero);
	if (!st)
		return FLOOD_ARMED;
	sec = now / cfg->hz;
	if (st->second != sec) {
		st->second = sec;
		st->count = 0;
		st->completed = 0;
	}
	st->count++;
	if (limit && st->count > limit) {
		st->armed_until = sec + RVS_EMBRYONIC_ARM_SECS;
		return FLOOD_OVER | FLOOD_ARMED;
	}
	open = st->count > st->completed ? st->count - st->completed : 0;
	if (!limit && open > RVS_EMBRYONIC_ARM_RATE) {
		st->armed_until = sec + RVS_EMBRYONIC_ARM_SECS;
		return FLOOD_ARMED;
	}
	return sec <= st->armed_until ? FLOOD_ARMED : 0;
}

/* A TCP flow's handshake completed (SYN_RECV to ESTABLISHED) on this CPU:
 * counted in the current window (flood_note), so that new flows whose
 * handshakes complete do not arm the embryonic tables. Without a division
 * or a look at the clock: a completion that comes after the second turned
 * counts in the window still there, and is dropped with it when the next
 * new flow opens a new one (or counts there, if one opened already: at
 * most a round trip's handshakes of the second before). `zero` points to a
 * zero key (the callers' frames have one to spare, and no byte more). */
static __always_inline void flood_completed(__u32 *zero)
{
	struct rvs_flood *st = bpf_map_lookup_elem(&flood, zero);

	if (st)
		st->completed++;
}

/* The flow a reply (VIP:vport -> client caddr:cport, as the client sees
 * it) belongs to, or the embryonic one of a SYN-ACK, brought up to date
 * with the reply: seen now, its TCP state advanced in the output
 * direction, no longer without replies. NULL when there is none (NAT and
 * FULLNAT replies alike). */
static __always_inline struct rvs_flow *reply_flow(const struct pkt *p, const __u32 *caddr,
						   const __u32 *vaddr, __be16 cport, __be16 vport)
{
	struct rvs_flow *f = flow_lookup(p->family, caddr, vaddr, cport, vport, p->proto);
	int embryo = 0;
	__u64 now;

	/* The SYN-ACK of a flow still in the embryonic table. */
	if (!f && p->proto == IPPROTO_TCP) {
		f = table_lookup(&embryonic4, &embryonic, p->family, caddr, vaddr, cport, vport,
				 p->proto);
		embryo = f != NULL;
	}
	if (!f)
		return NULL;
	now = bpf_jiffies64();
	f->last_seen = now;
	if (embryo)
		embryo_touch(now);
	if (p->proto == IPPROTO_TCP) {
		__u8 old = f->state;

		f->state = tcp_next_state(old, p->tcpflags, DIR_OUTPUT);
		conns_move(f->dest, p->proto, old, f->state);
	}
	f->flags &= ~RVS_FLOW_F_NOOUTPUT;
	return f;
}

#endif /* RVS_LIB_TCP_STATE_H */
