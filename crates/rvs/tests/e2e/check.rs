//! `rvsd --check`, `--help`, man pages and completions.

use std::path::Path;
use std::process::{Command, Output};

use crate::harness::{Launch, RVSADM, RVSD, TempDir, parts};

fn fixture(name: &str) -> String {
    format!(
        "{}/../config/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn seed_keepalived_examples_pass_check() {
    for f in [
        "seed_1_full.conf",
        "seed_2_ha_primary.conf",
        "seed_3_healthcheck.conf",
        "seed_4_dns_fragment.conf",
        "full.conf",
    ] {
        let out = rvsd_check("-f", Path::new(&fixture(f)), &[]);
        let (stdout, stderr, code) = parts(&out);
        assert_eq!(code, 0, "{f}: {stderr}");
        assert!(stdout.contains(": OK: "), "{f}: {stdout}");
    }
}

#[test]
fn broken_file_names_line_and_column() {
    let dir = TempDir::new("check");
    let p = dir.write(
        "bad.conf",
        "virtual_server 10.0.0.1 80 {\n    lb_algo rr\n    real_server 10.0.0.2 8o {\n    }\n}\n",
    );
    let out = rvsd_check("-f", &p, &[]);
    let (_, stderr, code) = parts(&out);
    assert_eq!(code, 1);
    let want = format!("{}:3:26:", p.display());
    assert!(stderr.starts_with(&want), "expected {want} in: {stderr}");
    assert!(stderr.contains("8o"), "{stderr}");
}

#[test]
fn unknown_keywords_are_warned_with_location() {
    let dir = TempDir::new("check-warn");
    let p = dir.write(
        "w.conf",
        "virtual_server 10.0.0.1 80 {\n    lb_algo rr\n    protocol TCP\n    frobnicate 3\n    real_server 10.0.0.2 80 {\n    }\n}\n",
    );
    let out = rvsd_check("-f", &p, &[]);
    let (stdout, _, code) = parts(&out);
    assert_eq!(code, 0);
    assert!(
        stdout.contains(&format!("{}:4:5: warning:", p.display())),
        "{stdout}"
    );
    assert!(stdout.contains("frobnicate"), "{stdout}");
}

#[test]
fn rules_file_loads_and_errors_are_located() {
    let dir = TempDir::new("check-rules");
    let good = dir.write(
        "r.rules",
        "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.0.0.2:80 -m -w 1\n",
    );
    let out = rvsd_check("--rules", &good, &[]);
    assert_eq!(parts(&out).2, 0, "{}", parts(&out).1);
    let bad = dir.write(
        "b.rules",
        "-A -t 10.0.0.1:80 -s rr\n  -a -t 10.0.0.9:80 -r 10.0.0.2:80\n",
    );
    let out = rvsd_check("--rules", &bad, &[]);
    let (_, stderr, code) = parts(&out);
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        format!("{}:2:3: Service not defined\n", bad.display())
    );
}

#[test]
fn help_man_and_completions() {
    for (bin, args, needle) in [
        (RVSD, vec!["--help"], "--config-file"),
        (RVSD, vec!["--man"], ".TH rvsd"),
        (RVSD, vec!["--completions", "bash"], "_rvsd()"),
        (RVSADM, vec!["--man"], ".TH rvsadm"),
        (RVSADM, vec!["--completions", "bash"], "_rvsadm()"),
        (RVSADM, vec!["--completions", "zsh"], "#compdef rvsadm"),
    ] {
        let out = Command::new(bin).args(&args).output().expect("run");
        let (stdout, stderr, code) = parts(&out);
        assert_eq!(code, 0, "{bin} {args:?}: {stderr}");
        assert!(stdout.contains(needle), "{bin} {args:?} lacks {needle}");
    }
}

/// The unit file in the repository refers to options rvsd really has.
#[test]
fn systemd_unit_uses_real_options() {
    let unit = std::fs::read_to_string(format!(
        "{}/../../dist/rvsd.service",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("unit");
    let start = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let args: Vec<&str> = start.split_whitespace().skip(1).collect();
    let help = String::from_utf8(
        Command::new(RVSD)
            .arg("--help")
            .output()
            .expect("rvsd")
            .stdout,
    )
    .expect("utf-8");
    for a in args.iter().filter(|a| a.starts_with('-')) {
        let long = if a.starts_with("--") {
            a.to_string()
        } else {
            format!("{a},")
        };
        assert!(help.contains(&long), "rvsd --help lacks {a}");
    }
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
}

/// A service plus `global` inside global_defs.
fn strict_conf(global: &str) -> String {
    format!(
        "global_defs {{\n    router_id STRICT\n{global}}}\nvirtual_server 10.0.0.1 80 {{\n    lb_algo rr\n    protocol TCP\n    real_server 10.0.0.2 80 {{\n    }}\n}}\n"
    )
}

#[test]
fn strict_refuses_keywords_that_are_not_applied() {
    let dir = TempDir::new("check-strict");
    let p = dir.write("s.conf", &strict_conf("    vrrp_garp_interval 1\n"));
    let run = |strict: bool| {
        parts(&rvsd_check(
            "-f",
            &p,
            if strict { &["--strict"] } else { &[] },
        ))
    };
    let (stdout, _, code) = run(false);
    assert_eq!(code, 0);
    let at = format!("{}:3:5:", p.display());
    assert!(
        stdout.contains(&format!(
            "{at} warning: `vrrp_garp_interval` is not applied by rvs"
        )),
        "{stdout}"
    );
    let (_, stderr, code) = run(true);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!("{at} `vrrp_garp_interval` is not applied by rvs")),
        "{stderr}"
    );
    assert!(stderr.contains("--strict"), "{stderr}");
}

/// `--strict` also refuses what rvsd's health checker and VRRP would not
/// carry out (here a FILE_CHECK and a track_script's `reverse`), not only
/// the keywords the reader does not apply.
#[test]
fn strict_refuses_what_health_and_vrrp_do_not_apply() {
    let dir = TempDir::new("check-strict-run");
    let p = dir.write(
        "r.conf",
        "vrrp_script chk {\n    script /bin/true\n}\nvrrp_instance VI_1 {\n    interface lo\n    virtual_router_id 9\n    priority 100\n    virtual_ipaddress {\n        10.0.0.100\n    }\n    track_script {\n        chk reverse\n    }\n}\nvirtual_server 10.0.0.1 80 {\n    lb_algo rr\n    protocol TCP\n    real_server 10.0.0.2 80 {\n        FILE_CHECK {\n            track_file f\n        }\n    }\n}\n",
    );
    let run = |strict: bool| {
        let mut c = Command::new(RVSD);
        c.arg("-f").arg(&p).arg("--check");
        if strict {
            c.arg("--strict");
        }
        parts(&c.output().expect("rvsd"))
    };
    let (stdout, _, code) = run(false);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("FILE_CHECK of real server 10.0.0.2:80 is not applied by rvs"),
        "{stdout}"
    );
    assert!(
        stdout.contains("`reverse` is not applied by rvs"),
        "{stdout}"
    );
    let (_, stderr, code) = run(true);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--strict: "), "{stderr}");
    assert!(
        stderr.contains("FILE_CHECK of real server 10.0.0.2:80 is not applied by rvs"),
        "{stderr}"
    );
    assert!(
        stderr.contains("`reverse` is not applied by rvs"),
        "{stderr}"
    );
}

#[test]
fn check_suggests_the_nearest_keyword() {
    let dir = TempDir::new("check-dym");
    let p = dir.write(
        "d.conf",
        "vrrp_instance VI {\n    state BACKUP\n    interface lo\n    virtual_router_id 7\n    priorty 10\n}\n",
    );
    let out = rvsd_check("-f", &p, &[]);
    let (stdout, stderr, code) = parts(&out);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!(
            "{}:5:5: warning: unknown keyword `priorty` in vrrp_instance; skipped; did you mean `priority`?",
            p.display()
        )),
        "{stdout}"
    );
}

/// `-i NAME` reaches the reader: a `@NAME` line with a keyword rvs does not
/// apply is only refused by `--strict` when NAME is the config id.
#[test]
fn config_id_selects_conditional_lines() {
    let dir = TempDir::new("check-id");
    let p = dir.write("i.conf", &strict_conf("@edge    vrrp_garp_interval 1\n"));
    let run = |ids: &[&str]| {
        let out = rvsd_check("-f", &p, &[&["--strict"], ids].concat());
        parts(&out)
    };
    let (_, stderr, code) = run(&[]);
    assert_eq!(code, 0, "{stderr}");
    let (_, stderr, code) = run(&["-i", "core"]);
    assert_eq!(code, 0, "{stderr}");
    let (_, stderr, code) = run(&["--config-id", "edge"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("`vrrp_garp_interval`"), "{stderr}");

    // Without -i the id is the host name up to its first dot, as keepalived.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let host = host.trim().split('.').next().unwrap_or("").to_owned();
    assert!(!host.is_empty());
    let p = dir.write(
        "h.conf",
        &strict_conf(&format!(
            "@{host}    vrrp_garp_interval 1
"
        )),
    );
    let out = rvsd_check("-f", &p, &["--strict"]);
    let (_, stderr, code) = parts(&out);
    assert_eq!(code, 1, "the host name is the default config id: {stderr}");
}

/// `--strict` at start-up: rvsd does not start; on a reload, the file is
/// refused and the running table stays.
#[test]
fn strict_is_honoured_at_start_and_on_reload() {
    let dir = TempDir::new("strict-load");
    let bad = dir.write("bad.conf", &strict_conf("    vrrp_garp_interval 1\n"));
    let err = Launch::at(&dir.path().join("bad.sock"))
        .plane("none")
        .arg("--strict")
        .arg("-f")
        .arg(&bad)
        .refused();
    assert!(err.contains("is not applied by rvs"), "{err}");

    let dir = TempDir::new("strict-reload");
    let path = dir.write("k.conf", &strict_conf(""));
    let path_s = path.display().to_string();
    let d = crate::harness::Rvsd::start_in(dir, &["--strict", "-f", &path_s]);
    let before = d.ok("-Ln");
    assert!(before.contains("10.0.0.2:80"), "{before}");
    std::fs::write(
        &path,
        strict_conf("    vrrp_garp_interval 1\n").replace("10.0.0.2 80", "10.0.0.3 80"),
    )
    .expect("write");
    let (out, err, code) = parts(&d.adm("--reload"));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("`vrrp_garp_interval` is not applied by rvs"),
        "{err}"
    );
    assert_eq!(d.ok("-Ln"), before, "a refused reload changes nothing");
}

/// `rvsd FLAG FILE --check EXTRA...` (FLAG `-f` or `--rules`), waited for.
fn rvsd_check(flag: &str, file: &Path, extra: &[&str]) -> Output {
    Command::new(RVSD)
        .arg(flag)
        .arg(file)
        .arg("--check")
        .args(extra)
        .output()
        .expect("rvsd")
}
