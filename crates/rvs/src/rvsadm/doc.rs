//! rvsadm's interface described for clap, used only to generate the man
//! page and shell completions (`rvsadm --man`, `rvsadm --completions SHELL`).
//! Parsing itself is rvs-ipvsadm's, byte-compatible with ipvsadm.

use std::process::ExitCode;

use clap::{Arg, ArgAction, Command};

fn flag(long: &'static str, short: Option<char>, help: &'static str) -> Arg {
    let a = Arg::new(long)
        .long(long)
        .help(help)
        .action(ArgAction::SetTrue);
    match short {
        Some(c) => a.short(c),
        None => a,
    }
}

fn value(long: &'static str, short: Option<char>, name: &'static str, help: &'static str) -> Arg {
    let a = Arg::new(long)
        .long(long)
        .value_name(name)
        .help(help)
        .num_args(1);
    match short {
        Some(c) => a.short(c),
        None => a,
    }
}

/// The documentation model of the command line.
pub fn command() -> Command {
    Command::new("rvsadm")
        .version(env!("CARGO_PKG_VERSION"))
        .about("Administer the rvs virtual server table (ipvsadm-compatible)")
        .long_about(
            "rvsadm takes ipvsadm 1.31's command line and prints ipvsadm's formats, \
             talking to the rvsd daemon over its control socket instead of the kernel. \
             Existing ipvsadm scripts work unchanged, -R included \
             (line by line, going on past refused lines). rvs-only features are extra long options.",
        )
        .disable_help_flag(true)
        .disable_version_flag(true)
        .args([
            flag("add-service", Some('A'), "Add a virtual service"),
            flag("edit-service", Some('E'), "Edit a virtual service"),
            flag(
                "delete-service",
                Some('D'),
                "Delete a virtual service and its real servers",
            ),
            flag("clear", Some('C'), "Clear the whole table"),
            flag(
                "restore",
                Some('R'),
                "Restore rules from stdin (line by line, like ipvsadm)",
            ),
            flag("save", Some('S'), "Save rules to stdout"),
            flag("add-server", Some('a'), "Add a real server"),
            flag("edit-server", Some('e'), "Edit a real server"),
            flag("delete-server", Some('d'), "Delete a real server"),
            flag("list", Some('L'), "List the table (also -l)"),
            flag(
                "zero",
                Some('Z'),
                "Zero counters of a service or of all services",
            ),
            Arg::new("set")
                .long("set")
                .value_names(["TCP", "TCPFIN", "UDP"])
                .num_args(3)
                .help("Set connection timeouts"),
            value(
                "start-daemon",
                None,
                "STATE",
                "Start the connection sync daemon (master|backup)",
            ),
            value(
                "stop-daemon",
                None,
                "STATE",
                "Stop the connection sync daemon",
            ),
            flag("help", Some('h'), "Display help"),
            flag("version", Some('v'), "Display version"),
            value(
                "tcp-service",
                Some('t'),
                "ADDR[:PORT]",
                "TCP virtual service",
            ),
            value(
                "udp-service",
                Some('u'),
                "ADDR[:PORT]",
                "UDP virtual service",
            ),
            value("sctp-service", None, "ADDR[:PORT]", "SCTP virtual service"),
            value(
                "fwmark-service",
                Some('f'),
                "MARK",
                "Firewall-mark virtual service",
            ),
            flag("ipv6", Some('6'), "The fwmark service is IPv6"),
            value(
                "scheduler",
                Some('s'),
                "NAME",
                "rr wrr lc wlc lblc lblcr dh sh sed nq fo ovf mh twos (default wlc)",
            ),
            Arg::new("persistent")
                .short('p')
                .long("persistent")
                .value_name("TIMEOUT")
                .num_args(0..=1)
                .help("Persistent service (default 360 s)"),
            value(
                "netmask",
                Some('M'),
                "MASK",
                "Persistence granularity mask (IPv6: prefix length)",
            ),
            value("pe", None, "ENGINE", "Persistence engine (sip)"),
            value(
                "sched-flags",
                Some('b'),
                "FLAGS",
                "Scheduler flags: flag-1,flag-2,flag-3, sh-fallback,sh-port, mh-fallback,mh-port",
            ),
            flag("ops", Some('o'), "One-packet scheduling (UDP)"),
            value("real-server", Some('r'), "ADDR[:PORT]", "Real server"),
            flag("gatewaying", Some('g'), "Direct routing (default)"),
            flag("ipip", Some('i'), "Tunnelling"),
            flag("masquerading", Some('m'), "NAT"),
            value("tun-type", None, "TYPE", "ipip|gue|gre|geneve|opt (rvs)"),
            value("tun-port", None, "PORT", "Tunnel destination port (gue)"),
            flag("tun-nocsum", None, "Tunnel without checksum"),
            flag("tun-csum", None, "Tunnel with checksum"),
            flag("tun-remcsum", None, "Tunnel with remote checksum"),
            value("weight", Some('w'), "WEIGHT", "Real server weight 0..65535"),
            value("u-threshold", Some('x'), "N", "Upper connection threshold"),
            value("l-threshold", Some('y'), "N", "Lower connection threshold"),
            flag("connection", Some('c'), "List connections"),
            flag("timeout", None, "List timeouts (tcp tcpfin udp)"),
            flag("daemon", None, "List sync daemons"),
            flag(
                "stats",
                None,
                "List statistics (rvsd --dataplane sock: Conns only, packets and bytes are not \
                 seen at the socket; xdp,sock: Conns of both planes, packets and bytes the XDP \
                 plane's)",
            ),
            flag("rate", None, "List rates"),
            flag("exact", Some('X'), "Exact numbers"),
            flag("thresholds", None, "List thresholds"),
            flag("persistent-conn", None, "List persistent connection info"),
            flag("tun-info", None, "List tunnel info"),
            flag("nosort", None, "Do not sort"),
            flag("sort", None, "Sort (default, no-op)"),
            flag("numeric", Some('n'), "Numeric addresses and ports"),
            value(
                "mcast-interface",
                None,
                "IFNAME",
                "Multicast interface for sync",
            ),
            value("syncid", None, "ID", "Sync id 0..255"),
            value("sync-maxlen", None, "LEN", "Max sync message length"),
            value("mcast-group", None, "ADDR", "Sync multicast group"),
            value("mcast-port", None, "PORT", "Sync UDP port"),
            value("mcast-ttl", None, "TTL", "Sync multicast TTL"),
            flag(
                "add-laddr",
                None,
                "rvs: add -z ADDR or ADDR-ADDR to the service's FULLNAT local address pool (DPVS's option; a FULLNAT real server on the xdp data plane needs one)",
            ),
            flag(
                "del-laddr",
                None,
                "rvs: delete the pool entry -z ADDR[-ADDR], named as it was added",
            ),
            flag(
                "get-laddr",
                None,
                "rvs: list the FULLNAT local address pools (of one service with -t/-u/-f) with the connections per entry",
            ),
            value(
                "laddr",
                Some('z'),
                "ADDR[-ADDR]",
                "rvs: FULLNAT local address or range, for --add-laddr/--del-laddr",
            ),
            flag(
                "reload",
                None,
                "rvs: make rvsd re-read its configuration file and apply the difference",
            ),
            flag(
                "remove-director",
                None,
                "rvs: make rvsd detach its XDP program from every interface, unpin its maps and links, and exit (a plain stop leaves the program forwarding)",
            ),
            flag(
                "checks",
                None,
                "rvs: with -L, list each real server's health-check state, weight, checkers and last failure reason",
            ),
            value(
                "mh-table-size",
                None,
                "PRIME",
                "rvs: Maglev table size for -s mh (default 4093)",
            ),
            value(
                "socket",
                None,
                "PATH",
                "rvs: control socket (default /run/rvs/rvsd.sock, or RVS_SOCKET)",
            ),
            flag("man", None, "rvs: print this man page"),
            value(
                "completions",
                None,
                "SHELL",
                "rvs: print a completion script (bash, zsh, fish, elvish, powershell)",
            ),
        ])
}

/// `rvsadm --man`.
pub fn man() -> ExitCode {
    match clap_mangen::Man::new(command()).render(&mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rvsadm: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `rvsadm --completions SHELL`.
pub fn completions(shell: &str) -> ExitCode {
    let Ok(sh) = shell.parse::<clap_complete::Shell>() else {
        eprintln!("rvsadm: unknown shell `{shell}` (bash, zsh, fish, elvish, powershell)");
        return ExitCode::from(2);
    };
    clap_complete::generate(sh, &mut command(), "rvsadm", &mut std::io::stdout());
    ExitCode::SUCCESS
}
