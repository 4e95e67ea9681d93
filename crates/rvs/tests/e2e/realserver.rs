//! `rvsd realserver` in a fresh namespace: what it sets, that running it
//! twice is fine, and that `--undo` (also twice) puts everything back.

use crate::harness::RVSD;
use crate::netns::Bed;

fn sysctl(h: &crate::netns::Host, key: &str) -> String {
    let o = h.exec(&["cat", &format!("/proc/sys/net/ipv4/conf/{key}")]);
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

fn show(h: &crate::netns::Host, args: &[&str]) -> String {
    String::from_utf8_lossy(&h.exec(args).stdout).into_owned()
}

/// `rvsd realserver` with the VIPs, mode and interface of both the set-up
/// and the undo run of `realserver_tun_idempotent_and_undone`, then `more`.
fn tun_args(more: &'static str) -> Vec<&'static str> {
    let common = "realserver --vip 10.77.0.100,fd77::100 --mode tun --interface eth0";
    std::iter::once(RVSD)
        .chain(common.split(' '))
        .chain(more.split(' '))
        .collect()
}

#[test]
fn realserver_tun_idempotent_and_undone() {
    let Some(mut bed) = Bed::new("realserver_tun_idempotent_and_undone") else {
        return;
    };
    let h = bed.host("rs", "10.77.0.11/24");
    let before: Vec<String> = [
        "all/arp_ignore",
        "eth0/arp_announce",
        "all/rp_filter",
        "eth0/rp_filter",
    ]
    .iter()
    .map(|k| sysctl(&h, k))
    .collect();
    h.exec(&["sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/all/rp_filter"]);
    let prep = tun_args("--tun-type gue --gue-port 6080");
    for round in 0..2 {
        let out = h.exec(&prep);
        let text = String::from_utf8_lossy(&out.stdout);
        let verb = if round == 0 { "added" } else { "kept" };
        for vip in ["10.77.0.100/32", "fd77::100/128"] {
            let line = format!("{verb} {vip} on lo");
            assert!(text.contains(&line), "{text}");
        }
    }
    let lo = show(&h, &["ip", "addr", "show", "dev", "lo"]);
    assert!(
        lo.contains("10.77.0.100/32") && lo.contains("fd77::100/128"),
        "{lo}"
    );
    for (k, v) in [
        ("all/arp_ignore", "1"),
        ("eth0/arp_ignore", "1"),
        ("all/arp_announce", "2"),
        ("eth0/arp_announce", "2"),
        ("all/rp_filter", "0"),
        ("eth0/rp_filter", "0"),
    ] {
        assert_eq!(sysctl(&h, k), v, "{k}");
    }
    let link = show(&h, &["ip", "link", "show", "dev", "eth0"]);
    assert!(
        link.contains("prog/xdp") && link.contains("rvs_decap"),
        "{link}"
    );

    let undo = tun_args("--undo");
    for _ in 0..2 {
        h.exec(&undo);
    }
    let lo = show(&h, &["ip", "addr", "show", "dev", "lo"]);
    assert!(
        !lo.contains("10.77.0.100") && !lo.contains("fd77::100"),
        "{lo}"
    );
    let link = show(&h, &["ip", "link", "show", "dev", "eth0"]);
    assert!(!link.contains("prog/xdp"), "{link}");
    // rp_filter back to what it was before the first run (1, set above).
    assert_eq!(sysctl(&h, "all/rp_filter"), "1");
    assert_eq!(sysctl(&h, "all/arp_ignore"), before[0]);
    assert_eq!(sysctl(&h, "eth0/arp_announce"), before[1]);
    assert_eq!(sysctl(&h, "eth0/rp_filter"), before[3]);
}

/// `rvsd realserver ARGS` run in `h`'s namespace, its output whatever its
/// status (the callers expect refusals).
fn realserver_in(h: &crate::netns::Host, args: &[&str]) -> std::process::Output {
    std::process::Command::new("ip")
        .args(["netns", "exec", &h.ns, RVSD, "realserver"])
        .args(args)
        .output()
        .expect("run")
}

#[test]
fn realserver_refuses_tun_without_interface() {
    let Some(mut bed) = Bed::new("realserver_refuses_tun_without_interface") else {
        return;
    };
    let h = bed.host("rs", "10.77.0.11/24");
    let o = realserver_in(&h, &["--vip", "10.77.0.100", "--mode", "tun"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--interface"));
    let o = realserver_in(
        &h,
        &[
            "--vip",
            "10.77.0.100",
            "--mode",
            "dr",
            "--interface",
            "nosuch0",
        ],
    );
    assert!(!o.status.success());
    // Nothing was changed.
    let lo = show(&h, &["ip", "addr", "show", "dev", "lo"]);
    assert!(!lo.contains("10.77.0.100"), "{lo}");
}
