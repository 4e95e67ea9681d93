// SPDX-License-Identifier: MIT OR Apache-2.0
/* lib/adopt.h: xdp_lb's path for a TCP segment without SYN of an unknown
 * flow of a hash-scheduled service (mh/sh/dh): the flow is adopted into the
 * flow table (svc_flood's `adopted`), counted and forwarded. */
#ifndef RVS_LIB_ADOPT_H
#define RVS_LIB_ADOPT_H

#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/flow.h"
#include "lib/stats.h"
#include "lib/tcp_state.h"
#include "lib/forward.h"
#include "lib/nat.h"
#include "lib/fnat.h"

/* ---------------------------------------------------- mid-flow adoption */

/* Mid-flow (hashed only, checked by the caller): adopted into the flow
 * table (its handshake is long done: never the embryonic table), unless it
 * is a RST or the guard is over its limit (DR/TUN: the hash finds the
 * server again); its own path, so that the SYN path stays as it was. `nf`
 * is the caller's (zeroed) flow entry, `old_dest`/`old_state` those of an
 * expired entry it replaces (`in_main`: one of the flow table). */
static __always_inline int adopt_midflow(struct xdp_md *ctx, const struct pkt *p,
					 struct rvs_flow *nf, const struct rvs_dest *d,
					 const struct rvs_config *cfg, __u32 svc_idx,
					 __u32 dest_idx, __u64 now, int in_main, __u32 old_dest,
					 __u8 old_state)
{
	if (!(p->tcpflags & TCPF_RST) &&
	    !((flood_note(cfg, now) & FLOOD_OVER) && d->method != RVS_FWD_NAT &&
		       d->method != RVS_FWD_FNAT)) {
		nf->last_seen = now;
		nf->dest = dest_idx;
		nf->svc = svc_idx;
		nf->flags = RVS_FLOW_F_NOOUTPUT;
		nf->state = tcp_next_state(RVS_TCP_S_NONE, p->tcpflags, DIR_INPUT_ONLY);
		if (flow_insert(p, nf) == 0) {
			flood_count(svc_idx, adopted);
			/* An expired entry it replaced (one of the
			 * embryonic table stays, for the sweep). */
			if (in_main)
				conns_add(old_dest, state_active(p->proto, old_state), -1);
			conns_add(dest_idx, state_active(p->proto, nf->state), 1);
			if (d->method == RVS_FWD_NAT)
				nat_rev_add(p, d, svc_idx, dest_idx);
		}
		flow_epoch_bump(p);
	} else if (!(p->tcpflags & TCPF_RST)) {
		flood_count(svc_idx, guarded);
	}
	count(&svc_stats, svc_idx, p->l3len, 0, 0);
	count(&dest_stats, dest_idx, p->l3len, 0, 0);
	if (d->method == RVS_FWD_FNAT)
		return fnat_enter(ctx, RVS_FNAT_INBOUND, dest_idx, svc_idx);
	return forward(ctx, p, d, cfg);
}

#endif /* RVS_LIB_ADOPT_H */
