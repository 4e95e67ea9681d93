//! End-to-end tests of the real `rvsd` and `rvsadm` binaries: a daemon per
//! test on its own socket in its own temporary directory, driven by
//! `rvsadm` exactly as an operator's scripts drive ipvsadm. One test binary
//! (like rustls's `tests/api.rs`) to keep link time down.

mod harness;

mod api;
mod api_conns;
mod api_load;
mod api_tls;
mod check;
mod dashboard;
mod dashboards;
mod dsr_opt;
mod failover;
mod fleet;
mod fleet_flows;
mod fullnat;
mod fullnat_pool;
mod fullnat_restart;
mod golden;
mod health;
mod health_probes;
mod http;
mod ipvs_failover;
mod ipvs_parity;
mod ipvs_sched_parity;
mod ipvs_sync;
mod ipvs_sync_more;
mod ipvs_sync_xdp;
mod kernel510;
mod kernel61;
mod kube_bench;
mod kubernetes;
mod netns;
mod netns_daemon;
mod notify_fifo;
mod package;
mod pins_netns;
mod proxy;
mod quic_common;
mod quic_lb;
mod quic_rotation;
mod quic_xdp;
mod realserver;
mod reload;
mod restart;
mod routes;
mod script_security;
mod services_10k;
mod smtp_alert;
mod sock;
mod socket;
mod streams;
mod sync;
mod synflood;
mod toa;
mod track;
mod tunnels;
mod upgrade;
mod vrrp;
mod vrrp_reload;
mod xdp;
mod xdp_rvsd;
mod xdp_sock;
mod xdpd;
