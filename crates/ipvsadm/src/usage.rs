//! `-h` and `-v` texts (ipvsadm.c `usage_exit`, `version`), with rvs's
//! extra options appended in their own section.

/// Schedulers listed in the help text (ipvsadm's `SCHEDULERS` build value).
const SCHEDULERS: &str = "rr|wrr|lc|wlc|lblc|lblcr|dh|sh|sed|nq|fo|ovf|mh";
/// Persistence engines listed in the help text (`PE_LIST`).
const PE_LIST: &str = "sip";

/// The `-v` line: ipvsadm's version string, so scripts that check it work.
pub fn version_text() -> String {
    "ipvsadm v1.31 2019/12/24 (compiled with popt and IPVS v1.2.1)\n".to_owned()
}

/// The `-h` text for program name `prog` (starts with [`version_text`]).
pub fn usage_text(prog: &str) -> String {
    let mut s = version_text();
    s.push_str("Usage:\n");
    for form in [
        "-A|E virtual-service [-s scheduler] [-p [timeout]] [-M netmask] [--pe persistence_engine] [-b sched-flags]",
        "-D virtual-service",
        "-C",
        "-R",
        "-S [-n]",
        "-a|e virtual-service -r server-address [options]",
        "-d virtual-service -r server-address",
        "-L|l [virtual-service] [options]",
        "-Z [virtual-service]",
        "--set tcp tcpfin udp",
        "--start-daemon {master|backup} [daemon-options]",
        "--stop-daemon {master|backup}",
        "-h",
    ] {
        s.push_str("  ");
        s.push_str(prog);
        s.push(' ');
        s.push_str(form);
        s.push('\n');
    }
    s.push('\n');
    s.push_str(
        "Commands:\n\
Either long or short options are allowed.\n\
\x20 --add-service     -A        add virtual service with options\n\
\x20 --edit-service    -E        edit virtual service with options\n\
\x20 --delete-service  -D        delete virtual service\n\
\x20 --clear           -C        clear the whole table\n\
\x20 --restore         -R        restore rules from stdin\n\
\x20 --save            -S        save rules to stdout\n\
\x20 --add-server      -a        add real server with options\n\
\x20 --edit-server     -e        edit real server with options\n\
\x20 --delete-server   -d        delete real server\n\
\x20 --list            -L|-l     list the table\n\
\x20 --zero            -Z        zero counters in a service or all services\n\
\x20 --set tcp tcpfin udp        set connection timeout values\n\
\x20 --start-daemon              start connection sync daemon\n\
\x20 --stop-daemon               stop connection sync daemon\n\
\x20 --help            -h        display this help message\n\n",
    );
    s.push_str(
        "virtual-service:\n\
\x20 --tcp-service|-t  service-address   service-address is host[:port]\n\
\x20 --udp-service|-u  service-address   service-address is host[:port]\n\
\x20 --sctp-service    service-address   service-address is host[:port]\n\
\x20 --fwmark-service|-f fwmark          fwmark is an integer greater than zero\n\
\n",
    );
    s.push_str(&format!(
        "Options:\n\
\x20 --ipv6         -6                   fwmark entry uses IPv6\n\
\x20 --scheduler    -s scheduler         one of {SCHEDULERS},\n\
\x20                                     the default scheduler is wlc.\n\
\x20 --pe            engine              alternate persistence engine may be {PE_LIST},\n\
\x20                                     not set by default.\n\
\x20 --persistent   -p [timeout]         persistent service\n\
\x20 --netmask      -M netmask           persistent granularity mask\n\
\x20 --real-server  -r server-address    server-address is host (and port)\n\
\x20 --gatewaying   -g                   gatewaying (direct routing) (default)\n\
\x20 --ipip         -i                   ipip encapsulation (tunneling)\n\
\x20 --masquerading -m                   masquerading (NAT)\n\
\x20 --tun-type      type                one of ipip|gue|gre,\n\
\x20                                     the default tunnel type is ipip.\n\
\x20 --tun-port      port                tunnel destination port\n\
\x20 --tun-nocsum                        tunnel encapsulation without checksum\n\
\x20 --tun-csum                          tunnel encapsulation with checksum\n\
\x20 --tun-remcsum                       tunnel encapsulation with remote checksum\n\
\x20 --weight       -w weight            capacity of real server\n\
\x20 --u-threshold  -x uthreshold        upper threshold of connections\n\
\x20 --l-threshold  -y lthreshold        lower threshold of connections\n\
\x20 --connection   -c                   output of current IPVS connections\n\
\x20 --timeout                           output of timeout (tcp tcpfin udp)\n\
\x20 --daemon                            output of daemon information\n\
\x20 --stats                             output of statistics information\n\
\x20 --rate                              output of rate information\n\
\x20 --exact                             expand numbers (display exact values)\n\
\x20 --thresholds                        output of thresholds information\n\
\x20 --persistent-conn                   output of persistent connection info\n\
\x20 --tun-info                          output of tunnel information\n\
\x20 --nosort                            disable sorting output of service/server entries\n\
\x20 --sort                              does nothing, for backwards compatibility\n\
\x20 --ops          -o                   one-packet scheduling\n\
\x20 --numeric      -n                   numeric output of addresses and ports\n\
\x20 --sched-flags  -b flags             scheduler flags (comma-separated)\n"
    ));
    s.push_str(
        "Daemon Options:\n\
\x20 --syncid sid                        syncid for connection sync (default=255)\n\
\x20 --sync-maxlen length                Max sync message length (default=1472)\n\
\x20 --mcast-interface interface         multicast interface for connection sync\n\
\x20 --mcast-group address               IPv4/IPv6 group (default=224.0.0.81)\n\
\x20 --mcast-port port                   UDP port (default=8848)\n\
\x20 --mcast-ttl ttl                     Multicast TTL (default=1)\n",
    );
    s.push_str(
        "rvs Options:\n\
\x20 --mh-table-size size                Maglev (mh) table size, a prime (default=4093)\n\
\x20 --fullnat                           full NAT forwarding (source and destination rewritten)\n\
\x20 --add-laddr|--del-laddr -t|-u|-f service -z addr[-addr]\n\
\x20                                     (command) add/delete a FULLNAT local address (pool entry)\n\
\x20 --get-laddr [-t|-u|-f service]      (command) list the FULLNAT local address pools\n\
\x20 --laddr        -z addr[-addr]       FULLNAT local address or range\n\
\x20 --quic-lb      cr=N,sid=N,nonce=N[,key=HEX32]\n\
\x20                                     with -A|-E (UDP, repeatable: one per rotation codepoint):\n\
\x20                                     route QUIC by the server ID in its connection IDs;\n\
\x20                                     with -L: list QUIC-LB configs (key fingerprint only),\n\
\x20                                     server IDs and routing counters\n\
\x20 --quic-sid     hex                 with -a|-e: the real server's QUIC-LB server ID\n\
\x20 --reload                            (command) make rvsd re-read its configuration file\n\
\x20 --remove-director                   (command) make rvsd detach its XDP program, unpin it and exit\n\
\x20 --checks                            with -L: health checks (state, weight, last failure)\n\
\x20 --announce                          with -L: VIP announcement to the BGP daemon (per VIP state)\n\
\x20 --drain [--grace SECONDS]           (command) withdraw every VIP, keep forwarding\n\
\x20 --undrain                           (command) announce the VIPs again\n",
    );
    s
}
