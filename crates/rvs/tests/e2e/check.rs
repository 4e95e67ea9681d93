//! `rvsd --check`, `--help`, man pages and completions.

use std::process::Command;

use crate::harness::{RVSADM, RVSD, TempDir, parts};

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
        let out = Command::new(RVSD)
            .args(["-f", &fixture(f), "--check"])
            .output()
            .expect("rvsd");
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
    let out = Command::new(RVSD)
        .arg("-f")
        .arg(&p)
        .arg("--check")
        .output()
        .expect("rvsd");
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
    let out = Command::new(RVSD)
        .arg("-f")
        .arg(&p)
        .arg("--check")
        .output()
        .expect("rvsd");
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
    let out = Command::new(RVSD)
        .arg("--rules")
        .arg(&good)
        .arg("--check")
        .output()
        .expect("rvsd");
    assert_eq!(parts(&out).2, 0, "{}", parts(&out).1);
    let bad = dir.write(
        "b.rules",
        "-A -t 10.0.0.1:80 -s rr\n  -a -t 10.0.0.9:80 -r 10.0.0.2:80\n",
    );
    let out = Command::new(RVSD)
        .arg("--rules")
        .arg(&bad)
        .arg("--check")
        .output()
        .expect("rvsd");
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
