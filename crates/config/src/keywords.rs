//! The keyword audit: every keepalived keyword rvs reads but does not carry
//! out, with the reason, and the keyword set of each block (for
//! "did you mean" suggestions).
//!
//! rvs's promise is that nothing in a keepalived.conf is silently ignored.
//! A keyword is either applied with keepalived's meaning, or listed here:
//! [`Outcome::NotApplied`] gives a located warning naming it (an error under
//! `--strict`), [`Outcome::Refused`] an error (running without it would be
//! unsafe), and [`Outcome::Quiet`] is accepted without a word because it
//! changes nothing on an rvs director — the reason says why, and
//! `docs/keepalived-keywords.md` repeats the table for operators.

/// The block a keyword is read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Block {
    /// The top level of the file.
    Top,
    /// `global_defs { }`.
    Global,
    /// `vrrp_instance NAME { }`.
    VrrpInstance,
    /// `vrrp_sync_group NAME { }`.
    SyncGroup,
    /// `vrrp_script NAME { }`.
    VrrpScript,
    /// `virtual_server ... { }`.
    VirtualServer,
    /// `real_server ... { }`.
    RealServer,
    /// A checker block (`HTTP_GET`, `TCP_CHECK`, ...).
    Checker,
    /// `url { }` in `HTTP_GET`/`SSL_GET`.
    Url,
    /// Global `SSL { }`.
    Ssl,
    /// rvs `quic_lb { }` in a `virtual_server`.
    QuicLb,
}

/// What rvs does with a keyword it reads but does not apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Carried out with keepalived's meaning; the behavioural test that
    /// shows it (`file::function`), or `""` when no test exercises the
    /// keyword yet (docs/keepalived-keywords.md lists those as untested).
    Applied(&'static str),
    /// Read and skipped with a located warning "`KEYWORD` is not applied by
    /// rvs (REASON)"; an error under `--strict`.
    NotApplied(&'static str),
    /// Refused with a located error: running without it would be unsafe.
    Refused(&'static str),
    /// Accepted without a warning: it changes nothing on an rvs director.
    Quiet(&'static str),
}

const SMTP: &str = "e-mail alerts are sent for VRRP instance transitions and health-check changes only; no mail for sync groups";
const SMTP_TEST: &str =
    "crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server";
const INSTANCE_KEYWORDS_TEST: &str =
    "crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance";
const CHECKER_KEYWORDS_TEST: &str =
    "crates/check/src/build.rs::checker_keywords_reach_the_probes_and_the_policy";
const SMTP_CHECK_TEST: &str = "crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_checker_and_quorum_changes_to_a_real_smtp_server";
const NO_EMAIL_FAULTS_TEST: &str =
    "crates/control/src/vrrp/tests.rs::no_email_faults_leaves_fault_transitions_unmailed";
const DOWN_TIMER_TEST: &str =
    "crates/control/src/vrrp/tests.rs::vrrp_down_timer_adverts_is_the_instances_default";
const RS_INIT_TEST: &str = "crates/check/src/policy_tests.rs::rs_init_notifies_runs_up_notifiers_for_servers_starting_alive";
const NO_CHECKER_EMAILS_TEST: &str =
    "crates/check/src/policy_tests.rs::no_checker_emails_mails_only_real_server_changes";
const FIFO: &str =
    "rvsd writes the FIFO lines of transitions only, not the current states again at a reload";
const FIFO_TEST: &str = "crates/rvs/tests/e2e/notify_fifo.rs::notify_fifo_lines_match_keepalived_s";
const ROUTES: &str =
    "rvs does not pick a default interface: each static_ipaddress line names its `dev`";
const RT_NAMES: &str = "rvs does not read iproute2's rt_tables / rt_protos names: give tables and protocols by number (main, local and default are known)";
const TRACK: &str = "BFD is not in rvs; the priority does not follow it";
const GROUP_TRACK: &str = "tracking in a vrrp_sync_group (track_file, track_process, global_tracking, sync_group_tracking_weight) is not applied; track in the member instances";
const TRACK_GROUP: &str =
    "track_group (static addresses, routes and rules in groups of instances) is not applied";
const GROUP_TRACK_GLOBAL: &str = "vrrp_track_process belongs at the top level of the file (rvs reads it there), not in global_defs";
const VRRP: &str =
    "rvs's VRRP does not implement this option; keepalived's default behaviour applies";
const GARP: &str = "rvs sends gratuitous ARP / NA only as garp_master_* say";
const FIREWALL: &str =
    "rvs installs no iptables/ipset/nftables rules (keepalived does so for vrrp_strict)";
const ACCEPT: &str = "rvs installs no firewall rules: traffic to the virtual addresses is always accepted, which is what `accept` asks";
const NO_ACCEPT: &str = "rvs installs no firewall rules: a master that does not own the addresses accepts traffic to them all the same (keepalived drops it)";
const SCRIPTS: &str =
    "scripts' paths are checked with their symlinks resolved, as keepalived does by default";
const SCRIPTS_TEST: &str = "crates/rvs/tests/e2e/script_security.rs::script_user_runs_scripts_as_that_user_and_script_security_refuses_writable_ones";
const STRICT_TEST: &str =
    "crates/control/src/vrrp/strict_tests.rs::vrrp_strict_applies_keepalived_s_checks_and_refusals";
const SMTP_HOST_TEST: &str = "crates/rvs/tests/e2e/health_probes.rs::smtp_check_hosts_are_each_checked_against_a_real_smtp_server";
const RELOAD: &str = "rvs reloads on SIGHUP or `rvsadm reload` only";
const LINKBEAT: &str = "rvs follows interface state over netlink only";
const NOTIFY: &str = "this notification is not implemented yet";
const SCHED: &str = "process scheduling, memory locking and rlimits of keepalived's child processes; rvsd is one process started by its service manager";
const SNMP: &str = "rvs has no SNMP agent (its metrics are Prometheus text: `--metrics`)";
const DBUS: &str = "rvs has no DBus interface";
const BUFS: &str =
    "socket buffer sizes of keepalived's netlink and VRRP sockets; rvs sizes its own";
const FILES: &str = "where keepalived writes its own pid, data and temporary files";
const INCLUDE: &str = "include with checks (includer/includem/includew/includeb/includea) is not implemented, and running without the file it names would be wrong; use `include`";
const START_STOP: &str = "startup and shutdown scripts are not implemented yet; nothing is run";
const PROCS: &str = "names of keepalived's processes; rvsd is one process";
const REGEX: &str =
    "HTTP body regular expressions are not checked; only status_code and digest decide";
const SSL: &str = "the global SSL block's files are not used by rvs's SSL_GET checker";
const NAMESPACE_IPVS: &str = "rvs runs its data plane and its health checks in one namespace (global_defs' net_namespace); IPVS in another one is not implemented, and running it in the wrong one would be wrong";
const NETNS_TEST: &str = "crates/rvs/tests/e2e/netns_daemon.rs::net_namespace_runs_the_daemon_inside_the_named_namespace";
const INSTANCE: &str = "rvsd writes no pid files; its socket, XDP pin directory (`--instance`) and state paths come from its command line";

use Block::*;
use Outcome::*;

/// The audited keywords: (block, keyword, outcome) — those rvs reads but
/// does not carry out, and those it carries out named with the test that
/// shows it ([`Outcome::Applied`]).
pub const TABLE: &[(Block, &str, Outcome)] = &[
    // Top level blocks.
    (Top, "linkbeat_interfaces", NotApplied(LINKBEAT)),
    (Top, "track_group", NotApplied(TRACK_GROUP)),
    (Top, "bfd_instance", NotApplied(TRACK)),
    (Top, "garp_group", NotApplied(GARP)),
    (Top, "interface_up_down_delays", NotApplied(LINKBEAT)),
    (Top, "includer", Refused(INCLUDE)),
    (Top, "includem", Refused(INCLUDE)),
    (Top, "includew", Refused(INCLUDE)),
    (Top, "includeb", Refused(INCLUDE)),
    (Top, "includea", Refused(INCLUDE)),
    // global_defs: mail, FIFOs, notifications.
    (Global, "notification_email", Applied(SMTP_TEST)),
    (Global, "notification_email_from", Applied(SMTP_TEST)),
    (Global, "smtp_server", Applied(SMTP_TEST)),
    (Global, "smtp_connect_timeout", Applied(SMTP_TEST)),
    (Global, "smtp_helo_name", Applied(SMTP_TEST)),
    (Global, "smtp_alert", Applied(SMTP_TEST)),
    (Global, "smtp_alert_vrrp", Applied(INSTANCE_KEYWORDS_TEST)),
    (Global, "smtp_alert_checker", Applied(CHECKER_KEYWORDS_TEST)),
    (Global, "no_email_faults", Applied(NO_EMAIL_FAULTS_TEST)),
    (Global, "no_checker_emails", Applied(NO_CHECKER_EMAILS_TEST)),
    (Global, "email_faults", Applied(NO_EMAIL_FAULTS_TEST)),
    (Global, "notify_fifo", Applied("")),
    (Global, "notify_fifo_script", Applied("")),
    (Global, "vrrp_notify_fifo", Applied(FIFO_TEST)),
    (Global, "vrrp_notify_fifo_script", Applied(FIFO_TEST)),
    (Global, "lvs_notify_fifo", Applied("")),
    (Global, "lvs_notify_fifo_script", Applied("")),
    (Global, "fifo_write_vrrp_states_on_reload", NotApplied(FIFO)),
    (Global, "rs_init_notifies", Applied(RS_INIT_TEST)),
    (
        Global,
        "notify_fifo_user",
        NotApplied(
            "the FIFOs' owner is given after each FIFO's path (`notify_fifo PATH USER [GROUP]`)",
        ),
    ),
    // global_defs: scripts.
    (Global, "script_user", Applied(SCRIPTS_TEST)),
    (Global, "enable_script_security", Applied(SCRIPTS_TEST)),
    (Global, "use_symlink_paths", NotApplied(SCRIPTS)),
    // global_defs: VRRP behaviour rvs does not implement.
    (Global, "vrrp_strict", Applied(STRICT_TEST)),
    (Global, "dynamic_interfaces", NotApplied(VRRP)),
    (Global, "vrrp_check_unicast_src", NotApplied(VRRP)),
    (Global, "vrrp_skip_check_adv_addr", NotApplied(VRRP)),
    (Global, "default_interface", NotApplied(ROUTES)),
    (Global, "vrrp_garp_interval", NotApplied(GARP)),
    (Global, "vrrp_gna_interval", NotApplied(GARP)),
    (Global, "vrrp_min_garp", NotApplied(GARP)),
    (Global, "vrrp_garp_lower_prio_delay", NotApplied(GARP)),
    (Global, "vrrp_garp_lower_prio_repeat", NotApplied(GARP)),
    (Global, "vrrp_garp_extra_if", NotApplied(GARP)),
    (Global, "vrrp_ipvs_garp", NotApplied(GARP)),
    (Global, "vrrp_lower_prio_no_advert", NotApplied(VRRP)),
    (Global, "vrrp_higher_prio_send_advert", NotApplied(VRRP)),
    (Global, "vrrp_owner_ignore_adverts", NotApplied(VRRP)),
    (Global, "vrrp_startup_delay", NotApplied(VRRP)),
    (Global, "log_unknown_vrids", NotApplied(VRRP)),
    (Global, "disable_local_igmp", NotApplied(VRRP)),
    (Global, "vrrp_track_process", NotApplied(GROUP_TRACK_GLOBAL)),
    (Global, "linkbeat_use_polling", NotApplied(LINKBEAT)),
    (Global, "linkbeat_interfaces", NotApplied(LINKBEAT)),
    (Global, "vrrp_iptables", NotApplied(FIREWALL)),
    (Global, "vrrp_ipsets", NotApplied(FIREWALL)),
    (Global, "nftables", NotApplied(FIREWALL)),
    (Global, "nftables_priority", NotApplied(FIREWALL)),
    (Global, "nftables_ifindex", NotApplied(FIREWALL)),
    (Global, "nftables_counters", NotApplied(FIREWALL)),
    (Global, "nftables_ipvs", NotApplied(FIREWALL)),
    (Global, "namespace_with_ipsets", NotApplied(FIREWALL)),
    (Global, "iproute_usr_dir", NotApplied(RT_NAMES)),
    (Global, "iproute_etc_dir", NotApplied(RT_NAMES)),
    (
        Global,
        "local_name",
        NotApplied("rvs does not use keepalived's local name"),
    ),
    (Global, "reload_time_file", NotApplied(RELOAD)),
    (Global, "reload_repeat", NotApplied(RELOAD)),
    (Global, "reload_file", NotApplied(RELOAD)),
    (
        Global,
        "config_save_dir",
        NotApplied("rvs keeps no copies of refused configurations"),
    ),
    // global_defs: namespaces (never run in the wrong one).
    (Global, "instance", NotApplied(INSTANCE)),
    (
        Global,
        "network_namespace",
        Refused("not a keepalived keyword; the namespace is `net_namespace NAME`"),
    ),
    (Global, "net_namespace", Applied(NETNS_TEST)),
    (Global, "net_namespace_ipvs", Refused(NAMESPACE_IPVS)),
    // global_defs: more of keepalived 2.2's keywords.
    (Global, "startup_script", NotApplied(START_STOP)),
    (Global, "startup_script_timeout", NotApplied(START_STOP)),
    (Global, "shutdown_script", NotApplied(START_STOP)),
    (Global, "shutdown_script_timeout", NotApplied(START_STOP)),
    (Global, "vrrp_down_timer_adverts", Applied(DOWN_TIMER_TEST)),
    (Global, "nftables_ipvs_priority", NotApplied(FIREWALL)),
    (Global, "nftables_ipvs_start_fwmark", NotApplied(FIREWALL)),
    (Global, "vrrp_notify_priority_changes", NotApplied(NOTIFY)),
    (Global, "vmac_prefix", NotApplied(VRRP)),
    (Global, "vmac_addr_prefix", NotApplied(VRRP)),
    (
        Global,
        "include_check",
        NotApplied("rvs does not check the ownership and permissions of included files"),
    ),
    (Global, "process_names", Quiet(PROCS)),
    (Global, "process_name", Quiet(PROCS)),
    (Global, "vrrp_process_name", Quiet(PROCS)),
    (Global, "checker_process_name", Quiet(PROCS)),
    (Global, "bfd_process_name", Quiet(PROCS)),
    // global_defs: nothing to do on an rvs director.
    (
        Global,
        "reload_check_config",
        Quiet("rvs always checks a reloaded file completely before applying any of it"),
    ),
    (
        Global,
        "random_seed",
        Quiet("it seeds ${_RANDOM} from its line on, which is all keepalived does with it"),
    ),
    (
        Global,
        "child_wait_time",
        Quiet("how long keepalived waits for its child processes; rvsd has none"),
    ),
    (Global, "use_pid_dir", Quiet(FILES)),
    (Global, "tmp_config_directory", Quiet(FILES)),
    (Global, "data_use_instance", Quiet(FILES)),
    (Global, "umask", Quiet(FILES)),
    (Global, "max_auto_priority", Quiet(SCHED)),
    (Global, "min_auto_priority_delay", Quiet(SCHED)),
    (Global, "vrrp_priority", Quiet(SCHED)),
    (Global, "checker_priority", Quiet(SCHED)),
    (Global, "bfd_priority", Quiet(SCHED)),
    (Global, "vrrp_no_swap", Quiet(SCHED)),
    (Global, "checker_no_swap", Quiet(SCHED)),
    (Global, "bfd_no_swap", Quiet(SCHED)),
    (Global, "vrrp_rt_priority", Quiet(SCHED)),
    (Global, "checker_rt_priority", Quiet(SCHED)),
    (Global, "bfd_rt_priority", Quiet(SCHED)),
    (Global, "vrrp_rlimit_rtime", Quiet(SCHED)),
    (Global, "checker_rlimit_rtime", Quiet(SCHED)),
    (Global, "bfd_rlimit_rtime", Quiet(SCHED)),
    (Global, "vrrp_rlimit_rttime", Quiet(SCHED)),
    (Global, "checker_rlimit_rttime", Quiet(SCHED)),
    (Global, "bfd_rlimit_rttime", Quiet(SCHED)),
    (Global, "vrrp_cpu_affinity", Quiet(SCHED)),
    (Global, "checker_cpu_affinity", Quiet(SCHED)),
    (Global, "bfd_cpu_affinity", Quiet(SCHED)),
    (Global, "snmp_socket", Quiet(SNMP)),
    (Global, "enable_snmp_vrrp", Quiet(SNMP)),
    (Global, "enable_snmp_keepalived", Quiet(SNMP)),
    (Global, "enable_snmp_rfc", Quiet(SNMP)),
    (Global, "enable_snmp_rfcv2", Quiet(SNMP)),
    (Global, "enable_snmp_rfcv3", Quiet(SNMP)),
    (Global, "enable_snmp_checker", Quiet(SNMP)),
    (Global, "enable_traps", Quiet(SNMP)),
    (Global, "enable_dbus", Quiet(DBUS)),
    (Global, "enable_dbus_instance", Quiet(DBUS)),
    (Global, "dbus_service_name", Quiet(DBUS)),
    (Global, "dbus_no_interface_name", Quiet(DBUS)),
    (Global, "vrrp_netlink_cmd_rcv_bufs", Quiet(BUFS)),
    (Global, "vrrp_netlink_cmd_rcv_bufs_force", Quiet(BUFS)),
    (Global, "vrrp_netlink_monitor_rcv_bufs", Quiet(BUFS)),
    (Global, "vrrp_netlink_monitor_rcv_bufs_force", Quiet(BUFS)),
    (Global, "process_monitor_rcv_bufs", Quiet(BUFS)),
    (Global, "process_monitor_rcv_bufs_force", Quiet(BUFS)),
    (Global, "lvs_netlink_cmd_rcv_bufs", Quiet(BUFS)),
    (Global, "lvs_netlink_cmd_rcv_bufs_force", Quiet(BUFS)),
    (Global, "lvs_netlink_monitor_rcv_bufs", Quiet(BUFS)),
    (Global, "lvs_netlink_monitor_rcv_bufs_force", Quiet(BUFS)),
    (Global, "vrrp_rx_bufs_policy", Quiet(BUFS)),
    (Global, "vrrp_rx_bufs_multiplier", Quiet(BUFS)),
    // vrrp_instance.
    (VrrpInstance, "track_bfd", NotApplied(TRACK)),
    (VrrpInstance, "smtp_alert", Applied(SMTP_TEST)),
    (VrrpInstance, "smtp_alert_vrrp", NotApplied(SMTP)),
    (VrrpInstance, "strict_mode", Applied(STRICT_TEST)),
    (VrrpInstance, "notify_deleted", NotApplied(NOTIFY)),
    (
        VrrpInstance,
        "notify_master_rx_lower_pri",
        NotApplied(NOTIFY),
    ),
    (VrrpInstance, "notify_priority_changes", NotApplied(NOTIFY)),
    (VrrpInstance, "native_ipv6", NotApplied(VRRP)),
    (VrrpInstance, "unicast_ttl", NotApplied(VRRP)),
    (VrrpInstance, "unicast_fault_no_peer", NotApplied(VRRP)),
    (VrrpInstance, "old_unicast_checksum", NotApplied(VRRP)),
    (VrrpInstance, "check_unicast_src", NotApplied(VRRP)),
    (VrrpInstance, "use_ipvlan", NotApplied(VRRP)),
    (VrrpInstance, "track_src_ip", NotApplied(VRRP)),
    (VrrpInstance, "linkbeat_use_polling", NotApplied(LINKBEAT)),
    (VrrpInstance, "garp_lower_prio_delay", NotApplied(GARP)),
    (VrrpInstance, "garp_lower_prio_repeat", NotApplied(GARP)),
    (VrrpInstance, "lower_prio_no_advert", NotApplied(VRRP)),
    (VrrpInstance, "higher_prio_send_advert", NotApplied(VRRP)),
    (VrrpInstance, "skip_check_adv_addr", NotApplied(VRRP)),
    (VrrpInstance, "vrrp_skip_check_adv_addr", NotApplied(VRRP)),
    (VrrpInstance, "auth_hmac", NotApplied(VRRP)),
    (VrrpInstance, "no_accept_prio", NotApplied(VRRP)),
    (VrrpInstance, "accept", Quiet(ACCEPT)),
    (VrrpInstance, "no_accept", NotApplied(NO_ACCEPT)),
    (VrrpInstance, "mcast_group", NotApplied(VRRP)),
    (VrrpInstance, "unicast_src_port", NotApplied(VRRP)),
    (VrrpInstance, "vrf", NotApplied(VRRP)),
    (VrrpInstance, "use_vmac_addr", NotApplied(VRRP)),
    (VrrpInstance, "mcast_dst_ip", NotApplied(VRRP)),
    (VrrpInstance, "garp_extra_if", NotApplied(GARP)),
    (VrrpInstance, "promote_secondaries", NotApplied(VRRP)),
    (VrrpInstance, "kernel_rx_buf_size", Quiet(BUFS)),
    (
        VrrpInstance,
        "debug",
        Quiet("keepalived's debug level; rvsd logs by `--log-level`"),
    ),
    (VrrpInstance, "snmp_name", Quiet(SNMP)),
    // vrrp_sync_group.
    (SyncGroup, "smtp_alert", NotApplied(SMTP)),
    (SyncGroup, "track_file", NotApplied(GROUP_TRACK)),
    (SyncGroup, "track_process", NotApplied(GROUP_TRACK)),
    (SyncGroup, "track_bfd", NotApplied(TRACK)),
    (SyncGroup, "global_tracking", NotApplied(GROUP_TRACK)),
    (
        SyncGroup,
        "sync_group_tracking_weight",
        NotApplied(GROUP_TRACK),
    ),
    (SyncGroup, "notify_deleted", NotApplied(NOTIFY)),
    (SyncGroup, "notify_priority_changes", NotApplied(NOTIFY)),
    // virtual_server / real_server.
    (VirtualServer, "smtp_alert", Applied(SMTP_CHECK_TEST)),
    (VirtualServer, "snmp_name", Quiet(SNMP)),
    (
        VirtualServer,
        "hashed",
        Quiet("IPVS marks every service hashed itself; the flag changes nothing"),
    ),
    (
        VirtualServer,
        "ha_suspend",
        NotApplied("services stay in the table whatever the VIPs' state"),
    ),
    (
        VirtualServer,
        "syn_proxy",
        NotApplied("rvs has no SYN proxy; the XDP plane's SYN-flood guard is `--max-new-flows`"),
    ),
    (
        VirtualServer,
        "nat_mask",
        NotApplied("rvs keeps no NAT netmask; every local address of the pool is used as given"),
    ),
    (RealServer, "smtp_alert", Applied(SMTP_CHECK_TEST)),
    (RealServer, "snmp_name", Quiet(SNMP)),
    (
        Checker,
        "fast_recovery",
        NotApplied("a failed server comes back after `retry` successes as usual"),
    ),
    (Url, "regex", NotApplied(REGEX)),
    (Url, "regex_no_match", NotApplied(REGEX)),
    (Url, "regex_options", NotApplied(REGEX)),
    (Url, "regex_stack", NotApplied(REGEX)),
    (Url, "regex_min_offset", NotApplied(REGEX)),
    (Url, "regex_max_offset", NotApplied(REGEX)),
    (Top, "SSL", NotApplied(SSL)),
    (Ssl, "password", NotApplied(SSL)),
    (Ssl, "ca", NotApplied(SSL)),
    (Ssl, "certificate", NotApplied(SSL)),
    (Ssl, "key", NotApplied(SSL)),
    (Checker, "host", Applied(SMTP_HOST_TEST)),
];

/// The global keywords keepalived takes at the top level of the file
/// (`install_keyword_root` in its `global_parser.c`: `net_namespace`,
/// `instance` and the others are not `global_defs` keywords there). rvs
/// reads each there as in `global_defs`, with the same outcome.
pub const ROOT_GLOBALS: &[&str] = &[
    "linkbeat_use_polling",
    "net_namespace",
    "net_namespace_ipvs",
    "namespace_with_ipsets",
    "use_pid_dir",
    "instance",
    "child_wait_time",
];

/// What rvs does with `keyword` in `block`; `None`: applied without an
/// audit entry (or unknown).
pub fn outcome(block: Block, keyword: &str) -> Option<Outcome> {
    let block = if block == Top && ROOT_GLOBALS.contains(&keyword) {
        Global
    } else {
        block
    };
    TABLE
        .iter()
        .find(|(b, k, _)| *b == block && *k == keyword)
        .map(|(_, _, o)| *o)
}

/// Keywords each block knows (applied or listed in [`TABLE`]): the
/// candidates of a "did you mean" suggestion.
pub fn known(block: Block) -> Vec<&'static str> {
    let applied: &[&str] = match block {
        Top => &[
            "global_defs",
            "SSL",
            "virtual_server_group",
            "virtual_server",
            "local_address_group",
            "vrrp_script",
            "vrrp_sync_group",
            "vrrp_instance",
            "static_ipaddress",
            "track_file",
            "vrrp_track_file",
            "vrrp_track_process",
            "track_process",
            "static_routes",
            "static_rules",
        ],
        Global => &[
            "router_id",
            "lvs_timeouts",
            "lvs_sync_daemon",
            "lvs_flush",
            "lvs_flush_on_stop",
            "vrrp_version",
            "vrrp_mcast_group4",
            "vrrp_mcast_group6",
            "vrrp_garp_master_delay",
            "vrrp_garp_master_repeat",
            "vrrp_garp_master_refresh",
            "vrrp_garp_master_refresh_repeat",
            "vrrp_skip_check_adv_addr",
            "vrrp_check_unicast_src",
            "v3_checksum_as_v2",
            "checker_log_all_failures",
        ],
        VrrpInstance => &[
            "state",
            "interface",
            "virtual_router_id",
            "priority",
            "advert_int",
            "nopreempt",
            "preempt",
            "preempt_delay",
            "authentication",
            "virtual_ipaddress",
            "virtual_ipaddress_excluded",
            "unicast_src_ip",
            "mcast_src_ip",
            "unicast_peer",
            "track_interface",
            "track_script",
            "version",
            "use_vmac",
            "vmac_xmit_base",
            "accept",
            "no_accept",
            "garp_master_delay",
            "garp_master_repeat",
            "garp_master_refresh",
            "garp_master_refresh_repeat",
            "down_timer_adverts",
            "lvs_sync_daemon_interface",
            "dont_track_primary",
            "virtual_routes",
            "virtual_rules",
            "track_file",
            "track_process",
            "notify_master",
            "notify_backup",
            "notify_fault",
            "notify_stop",
            "notify",
        ],
        SyncGroup => &[
            "group",
            "track_interface",
            "track_script",
            "notify_master",
            "notify_backup",
            "notify_fault",
            "notify_stop",
            "notify",
        ],
        VrrpScript => &[
            "script",
            "interval",
            "timeout",
            "weight",
            "rise",
            "fall",
            "user",
            "init_fail",
        ],
        VirtualServer => &[
            "delay_loop",
            "lvs_sched",
            "lb_algo",
            "lvs_method",
            "lb_kind",
            "persistence_engine",
            "persistence_timeout",
            "persistence_granularity",
            "protocol",
            "ha_suspend",
            "alpha",
            "omega",
            "quorum",
            "hysteresis",
            "quorum_up",
            "quorum_down",
            "ip_family",
            "virtualhost",
            "sorry_server",
            "sorry_server_inhibit",
            "sorry_server_lvs_method",
            "connect_timeout",
            "retry",
            "nb_get_retry",
            "delay_before_retry",
            "warmup",
            "inhibit_on_failure",
            "laddr_group_name",
            "syn_proxy",
            "nat_mask",
            "mh_table_size",
            "proxy_protocol",
            "max_conns",
            "quic_lb",
            "real_server",
            "hashed",
            "ops",
        ],
        RealServer => &[
            "weight",
            "lvs_method",
            "lb_kind",
            "notify_up",
            "notify_down",
            "proxy_protocol",
            "quic_server_id",
            "uthreshold",
            "lthreshold",
            "inhibit_on_failure",
            "alpha",
            "connect_timeout",
            "retry",
            "nb_get_retry",
            "delay_before_retry",
            "warmup",
            "delay_loop",
            "virtualhost",
            "HTTP_GET",
            "SSL_GET",
            "TCP_CHECK",
            "SMTP_CHECK",
            "DNS_CHECK",
            "MISC_CHECK",
            "UDP_CHECK",
            "PING_CHECK",
            "FILE_CHECK",
            "BFD_CHECK",
        ],
        Checker => &[
            "connect_ip",
            "connect_port",
            "bindto",
            "bind_if",
            "bind_port",
            "fwmark",
            "alpha",
            "connect_timeout",
            "retry",
            "nb_get_retry",
            "delay_before_retry",
            "warmup",
            "delay_loop",
            "log_all_failures",
            "http_protocol",
            "fast_recovery",
            "virtualhost",
            "enable_sni",
            "sni_name",
            "tls_compliant",
            "url",
            "type",
            "name",
            "misc_path",
            "misc_timeout",
            "misc_dynamic",
            "user",
            "payload",
            "require_reply",
            "min_reply_length",
            "max_reply_length",
            "helo_name",
            "track_file",
            "dynamic",
            "weight",
        ],
        Url => &[
            "path",
            "digest",
            "status_code",
            "virtualhost",
            "regex",
            "regex_no_match",
            "regex_options",
            "regex_stack",
            "regex_min_offset",
            "regex_max_offset",
        ],
        Ssl => &["password", "ca", "certificate", "key"],
        QuicLb => &["rotation", "server_id_len", "nonce_len", "key"],
    };
    let mut v: Vec<&'static str> = applied.to_vec();
    v.extend(
        TABLE
            .iter()
            .filter(|(b, _, _)| *b == block)
            .map(|(_, k, _)| *k),
    );
    if block == Top {
        v.extend(ROOT_GLOBALS);
    }
    v
}

/// The nearest known keyword of `block` to a misspelled `word`: edit
/// distance at most 2 (1 for words of four letters or fewer), ties to the
/// first in the block's list.
pub fn suggest(block: Block, word: &str) -> Option<&'static str> {
    let bound = if word.chars().count() <= 4 { 1 } else { 2 };
    known(block)
        .into_iter()
        .map(|k| {
            (
                distance(&word.to_ascii_lowercase(), &k.to_ascii_lowercase()),
                k,
            )
        })
        .filter(|(d, _)| *d <= bound && *d > 0)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Damerau-Levenshtein (optimal string alignment) distance: a swapped pair
/// of letters counts as one edit, the commonest typo.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(w) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_stay_in_the_block() {
        assert_eq!(suggest(VrrpInstance, "priorty"), Some("priority"));
        assert_eq!(
            suggest(VrrpInstance, "virtual_router_di"),
            Some("virtual_router_id")
        );
        assert_eq!(suggest(Global, "priorty"), None);
        assert_eq!(suggest(VrrpInstance, "completely_else"), None);
    }

    /// FULLNAT's pool keywords are carried out (into the service's local
    /// address pool, `convert.rs`), so the audit lists them as known and
    /// never warns about them.
    #[test]
    fn fullnat_pool_keywords_are_applied() {
        assert_eq!(outcome(Top, "local_address_group"), None);
        assert_eq!(outcome(VirtualServer, "laddr_group_name"), None);
        assert!(known(Top).contains(&"local_address_group"));
        assert!(known(VirtualServer).contains(&"laddr_group_name"));
    }

    #[test]
    fn the_table_has_no_duplicates() {
        for (i, (b, k, _)) in TABLE.iter().enumerate() {
            assert!(
                !TABLE[..i].iter().any(|(b2, k2, _)| b2 == b && k2 == k),
                "{b:?} {k} twice"
            );
        }
    }
}
