//! `rvsadm`: ipvsadm's command line, talking to `rvsd`.
//!
//! Every ipvsadm 1.31 command and option works as it does with ipvsadm, with
//! ipvsadm's output formats, error texts and exit codes. rvs-only features
//! are extra long options: `--reload` (re-read rvsd's configuration file),
//! `--mh-table-size N`, `--socket PATH` (or `RVS_SOCKET`), and for packagers
//! `--man` and `--completions SHELL`.

#![forbid(unsafe_code)]

mod doc;

use std::io::{BufReader, Read};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use rvs_control::protocol::{
    Command, DEFAULT_SOCKET, Request, Response, SOCKET_ENV, read_message, write_message,
};
use rvs_ipvsadm::control::{KERNEL_ERROR_EXIT, error_text, to_command};
use rvs_ipvsadm::names::SystemNames;
use rvs_ipvsadm::snapshot::Snapshot;
use rvs_ipvsadm::{
    Command as Ipvsadm, ListTarget, SyncState, format_list_with, format_save_with,
    parse_args_named, parse_restore_line,
};

const PROG: &str = "rvsadm";

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1))
}

/// A failure with the text to print and the exit status.
struct Fail(String, i32);

fn main() -> ExitCode {
    rvs_sys::sched::default_sigpipe();
    let mut args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let socket = match take_socket(&mut args) {
        Ok(s) => s,
        Err(Fail(msg, code)) => {
            eprintln!("{msg}");
            return exit(code);
        }
    };
    match args.first().map(String::as_str) {
        Some("--man") if args.len() == 1 => return doc::man(),
        Some("--completions") if args.len() == 2 => return doc::completions(&args[1]),
        _ => {}
    }
    match run(args, &socket) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(msg, code)) => {
            if !msg.is_empty() {
                eprintln!("{msg}");
            }
            exit(code)
        }
    }
}

/// `--socket PATH` / `--socket=PATH` anywhere on the line (removed before
/// ipvsadm's parser sees the arguments), else `RVS_SOCKET`, else the default.
fn take_socket(args: &mut Vec<String>) -> Result<PathBuf, Fail> {
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--socket" {
            let Some(v) = args.get(i + 1).cloned() else {
                return Err(Fail("--socket: missing argument".into(), 255));
            };
            args.drain(i..i + 2);
            found = Some(v);
        } else if let Some(v) = args[i].strip_prefix("--socket=") {
            found = Some(v.to_owned());
            args.remove(i);
        } else {
            i += 1;
        }
    }
    Ok(PathBuf::from(
        found
            .or_else(|| std::env::var(SOCKET_ENV).ok())
            .unwrap_or_else(|| DEFAULT_SOCKET.to_owned()),
    ))
}

/// One request/response exchange with rvsd.
fn call(socket: &PathBuf, req: &Request) -> Result<Response, Fail> {
    let cannot = |e: &dyn std::fmt::Display| {
        Fail(
            format!(
                "Can't initialize ipvs: {e} ({})\nAre you sure that rvsd is running?",
                socket.display()
            ),
            2,
        )
    };
    let stream = UnixStream::connect(socket).map_err(|e| cannot(&e))?;
    let mut w = stream.try_clone().map_err(|e| cannot(&e))?;
    write_message(&mut w, req).map_err(|e| cannot(&e))?;
    read_message(&mut BufReader::new(stream)).map_err(|e| cannot(&e))
}

fn snapshot(socket: &PathBuf, conns: bool) -> Result<Snapshot, Fail> {
    match call(socket, &Request::State { conns })? {
        Response::State(v) => serde_json::from_value(v)
            .map_err(|e| Fail(format!("rvsadm: unexpected state from rvsd: {e}"), 1)),
        Response::Error { message, .. } => Err(Fail(message, 1)),
        other => Err(Fail(
            format!("rvsadm: unexpected answer from rvsd: {other:?}"),
            1,
        )),
    }
}

/// A request answered with Ok or an error text (printed as ipvsadm prints
/// the kernel's).
fn simple(socket: &PathBuf, req: &Request) -> Result<(), Fail> {
    match call(socket, req)? {
        Response::Ok => Ok(()),
        Response::Error { message, .. } => Err(Fail(message, KERNEL_ERROR_EXIT)),
        other => Err(Fail(
            format!("rvsadm: unexpected answer from rvsd: {other:?}"),
            1,
        )),
    }
}

/// Send table changes; on failure print what ipvsadm would for the failing one.
fn exec(socket: &PathBuf, commands: Vec<Command>, atomic: bool) -> Result<(), Fail> {
    let answer = call(
        socket,
        &Request::Exec {
            commands: commands.clone(),
            atomic,
        },
    )?;
    answered(&commands, answer)
}

/// What rvsd's answer to `commands` means to the user: the error text
/// ipvsadm prints for the failing command.
fn answered(commands: &[Command], answer: Response) -> Result<(), Fail> {
    match answer {
        Response::Ok => Ok(()),
        Response::Error {
            message,
            index,
            ctl,
        } => {
            let text = match (ctl, index.and_then(|i| commands.get(i))) {
                (Some(e), Some(c)) => error_text(c, &e),
                _ => message,
            };
            Err(Fail(text, KERNEL_ERROR_EXIT))
        }
        other => Err(Fail(
            format!("rvsadm: unexpected answer from rvsd: {other:?}"),
            1,
        )),
    }
}

fn run(mut args: Vec<String>, socket: &PathBuf) -> Result<(), Fail> {
    if let Some(r) = announce_commands(&mut args, socket) {
        return r;
    }
    if let Some(i) = args.iter().position(|a| a == "--checks") {
        args.remove(i);
        // `rvsadm -L -n --checks` (the listing options are accepted and
        // change nothing: addresses are always numeric here).
        if args.iter().any(|a| {
            !matches!(
                a.as_str(),
                "-L" | "-l" | "--list" | "-n" | "--numeric" | "-Ln" | "-nL"
            )
        }) {
            return Err(Fail(
                "--checks: only with -L/--list and -n/--numeric".into(),
                2,
            ));
        }
        return checks(socket);
    }
    let inv = parse_args_named(PROG, args).map_err(|e| Fail(e.to_string(), e.exit_code))?;
    match inv.command {
        Ipvsadm::Help => {
            print!("{}", rvs_ipvsadm::usage_text(PROG));
            Ok(())
        }
        Ipvsadm::Version => {
            print!("{}", rvs_ipvsadm::version_text());
            Ok(())
        }
        Ipvsadm::List(opts) => {
            let snap = snapshot(socket, opts.target == ListTarget::Connections)?;
            let out = format_list_with(&snap, &opts, &SystemNames)
                .map_err(|e| Fail(e.message, e.exit_code))?;
            print!("{out}");
            Ok(())
        }
        Ipvsadm::Save { numeric } => {
            let snap = snapshot(socket, false)?;
            print!("{}", format_save_with(&snap, numeric, &SystemNames));
            Ok(())
        }
        Ipvsadm::GetLaddr(key) => {
            let snap = snapshot(socket, true)?;
            let only = key
                .as_ref()
                .map(rvs_ipvsadm::snapshot::ServiceKeySnap::from);
            if let Some(k) = &only
                && !snap.services.iter().any(|s| s.key == *k)
            {
                return Err(Fail("No such service".into(), 1));
            }
            // Numeric always, as DPVS lists its pools.
            print!(
                "{}",
                rvs_ipvsadm::format_laddrs_with(&snap, only.as_ref(), true, &SystemNames)
            );
            Ok(())
        }
        Ipvsadm::Restore => restore(socket),
        Ipvsadm::Reload => match call(socket, &Request::Reload)? {
            Response::Reloaded { summary } => {
                println!("{summary}");
                Ok(())
            }
            Response::Error { message, .. } => Err(Fail(message, 1)),
            other => Err(Fail(
                format!("rvsadm: unexpected answer from rvsd: {other:?}"),
                1,
            )),
        },
        Ipvsadm::RemoveDirector => simple(socket, &Request::RemoveDirector),
        Ipvsadm::StartDaemon(d) => simple(socket, &Request::StartDaemon(d)),
        Ipvsadm::StopDaemon(d) => simple(
            socket,
            &Request::StopDaemon {
                master: d.state == SyncState::Master,
            },
        ),
        other => match to_command(&other) {
            Ok(Some(cmd)) => exec(socket, vec![cmd], false),
            Ok(None) => Ok(()),
            // Only an unknown --pe fails here; its text names no operation.
            Err(e) => Err(Fail(error_text(&Command::Clear, &e), KERNEL_ERROR_EXIT)),
        },
    }
}

/// The rvs-only announcement commands: `--drain [--grace SECONDS]`,
/// `--undrain`, `-L --announce`; `None` when `args` is none of them.
fn announce_commands(args: &mut Vec<String>, socket: &PathBuf) -> Option<Result<(), Fail>> {
    let take = |args: &mut Vec<String>, flag: &str| {
        args.iter().position(|a| a == flag).map(|i| args.remove(i))
    };
    if take(args, "--drain").is_some() {
        let mut grace = 0.0;
        if let Some(i) = args.iter().position(|a| a == "--grace") {
            args.remove(i);
            if i >= args.len() {
                return Some(Err(Fail("--grace: needs SECONDS".into(), 2)));
            }
            let v = args.remove(i);
            match v.parse::<f64>() {
                Ok(g) if g.is_finite() && g >= 0.0 => grace = g,
                _ => {
                    return Some(Err(Fail(
                        format!("--grace {v}: not a number of seconds"),
                        2,
                    )));
                }
            }
        }
        if !args.is_empty() {
            return Some(Err(Fail(
                format!("--drain: unexpected {}", args.join(" ")),
                2,
            )));
        }
        let grace_ms = (grace * 1000.0).round() as u64;
        return Some(simple(socket, &Request::Drain { grace_ms }));
    }
    if take(args, "--undrain").is_some() {
        if !args.is_empty() {
            return Some(Err(Fail(
                format!("--undrain: unexpected {}", args.join(" ")),
                2,
            )));
        }
        return Some(simple(socket, &Request::Undrain));
    }
    if take(args, "--announce").is_some() {
        if args.iter().any(|a| {
            !matches!(
                a.as_str(),
                "-L" | "-l" | "--list" | "-n" | "--numeric" | "-Ln" | "-nL"
            )
        }) {
            return Some(Err(Fail(
                "--announce: only with -L/--list and -n/--numeric".into(),
                2,
            )));
        }
        return Some(match call(socket, &Request::Announce) {
            Ok(Response::State(v)) => {
                print!("{}", format_announce(&v));
                Ok(())
            }
            Ok(Response::Error { message, .. }) => Err(Fail(message, 1)),
            Ok(other) => Err(Fail(
                format!("rvsadm: unexpected answer from rvsd: {other:?}"),
                1,
            )),
            Err(e) => Err(e),
        });
    }
    None
}

/// Text of `-L --announce` from the daemon's JSON: the director's drain
/// state, the BGP daemon watch, one line per VIP.
fn format_announce(v: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if v["enabled"].as_bool() != Some(true) {
        out.push_str("No announcement (rvsd runs without --announce-table)\n");
        return out;
    }
    let _ = writeln!(
        out,
        "Director: {} (table {}, proto {})",
        v["director"].as_str().unwrap_or("?"),
        v["table"],
        v["proto"]
    );
    if let Some(e) = v["error"].as_str() {
        let _ = writeln!(out, "Error: {e}");
    }
    match &v["bgp_daemon"] {
        serde_json::Value::Null => {}
        b => {
            let _ = writeln!(
                out,
                "BGP daemon: {} {}: {}",
                b["kind"].as_str().unwrap_or("?"),
                b["target"].as_str().unwrap_or(""),
                b["summary"].as_str().unwrap_or("")
            );
        }
    }
    let _ = writeln!(out, "{:<40} {:<10} Reason", "VIP", "State");
    let empty = Vec::new();
    for x in v["vips"].as_array().unwrap_or(&empty) {
        let _ = writeln!(
            out,
            "{:<40} {:<10} {}",
            x["vip"].as_str().unwrap_or(""),
            x["state"].as_str().unwrap_or(""),
            x["reason"].as_str().unwrap_or("")
        );
    }
    out
}

/// `--checks`: each virtual server's quorum, each real server's health
/// state and weight, and each checker's state and last failure reason.
fn checks(socket: &PathBuf) -> Result<(), Fail> {
    let v = match call(socket, &Request::Checks)? {
        Response::State(v) => v,
        Response::Error { message, .. } => return Err(Fail(message, 1)),
        other => {
            return Err(Fail(
                format!("rvsadm: unexpected answer from rvsd: {other:?}"),
                1,
            ));
        }
    };
    print!("{}", format_checks(&v));
    Ok(())
}

/// Text of `--checks` from the daemon's JSON.
fn format_checks(v: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let s = |x: &serde_json::Value, k: &str| x[k].as_str().unwrap_or("").to_owned();
    let n = |x: &serde_json::Value, k: &str| x[k].as_u64().unwrap_or(0);
    let b = |x: &serde_json::Value, k: &str| x[k].as_bool().unwrap_or(false);
    let mut out = String::new();
    let empty = Vec::new();
    let vss = v.as_array().unwrap_or(&empty);
    if vss.is_empty() {
        out.push_str("No health checkers (rvsd runs them for -f keepalived.conf)\n");
    }
    for vs in vss {
        let _ = writeln!(
            out,
            "{}  quorum {}/{} {}  alive weight {}{}",
            s(vs, "name"),
            n(vs, "quorum"),
            n(vs, "hysteresis"),
            if b(vs, "quorum_up") { "UP" } else { "DOWN" },
            n(vs, "alive_weight"),
            if b(vs, "sorry_active") {
                "  sorry server active"
            } else {
                ""
            }
        );
        for rs in vs["reals"].as_array().unwrap_or(&empty) {
            let alive = b(rs, "alive");
            // What the data plane holds: the weight, 0 when inhibited,
            // nothing when removed.
            let held = if alive {
                format!("weight {}", n(rs, "weight"))
            } else if b(rs, "inhibit") {
                "weight 0 (inhibited)".to_owned()
            } else {
                "removed".to_owned()
            };
            let mut line = format!(
                "  -> {:<24} {:<5} {held}",
                s(rs, "name"),
                if alive { "UP" } else { "DOWN" },
            );
            if alive && n(rs, "weight") != n(rs, "configured_weight") {
                let _ = write!(line, " (configured {})", n(rs, "configured_weight"));
            }
            if let Some(r) = rs["down_reason"].as_str() {
                let _ = write!(line, "  reason: {r}");
            }
            let _ = writeln!(out, "{line}");
            for c in rs["checkers"].as_array().unwrap_or(&empty) {
                let mut line = format!(
                    "       {:<30} {:<5}",
                    s(c, "label"),
                    if b(c, "up") { "UP" } else { "DOWN" }
                );
                match c["last_ok"].as_bool() {
                    None => line.push_str(" not run yet"),
                    Some(ok) => {
                        let _ = write!(
                            line,
                            " last {} in {:.1}ms",
                            if ok { "ok" } else { "failed" },
                            n(c, "last_latency_us") as f64 / 1000.0
                        );
                    }
                }
                if n(c, "retries") > 0 {
                    let _ = write!(line, ", retry {}", n(c, "retries"));
                }
                if let Some(f) = c["last_failure"].as_str() {
                    let _ = write!(line, "  last failure: {f}");
                }
                let _ = writeln!(out, "{line}");
            }
        }
    }
    out
}

/// `-R`: read ipvsadm commands from stdin and apply them as ONE atomic batch
/// (ipvsadm applies them one by one and leaves a half-applied table on the
/// first error; rvs applies all or nothing).
/// `-R` as ipvsadm 1.31 does it (config_stream.c and its callers): line
/// by line, each applied on its own. A rule the daemon refuses prints its
/// error and the restore goes on; a command line ipvsadm would exit on
/// (any parse error but a popt syntax error after the command option)
/// ends it there, the lines before it applied. The exit status is the
/// last line's (0, or 255 when the daemon refused it). Users' scripts
/// today see this behaviour from the kernel's ipvsadm.
fn restore(socket: &PathBuf) -> Result<(), Fail> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| Fail(format!("rvsadm: reading stdin: {e}"), 1))?;
    let mut status = 0;
    // Consecutive rules go to rvsd together (each still applied on its
    // own); anything else on a line first sends what is pending, so that
    // output and errors keep the lines' order.
    let mut pending: Vec<Command> = Vec::new();
    for line in text.lines() {
        let inv = match parse_restore_line(line) {
            Ok(None) => continue,
            Ok(Some(inv)) => inv,
            Err(e) => {
                apply_each(socket, &mut pending);
                if e.aborts_restore {
                    return Err(Fail(e.to_string(), e.exit_code));
                }
                eprintln!("{e}");
                status = e.exit_code;
                continue;
            }
        };
        match to_command(&inv.command) {
            Ok(Some(c)) => {
                pending.push(c);
                if pending.len() >= RESTORE_BATCH {
                    status = apply_each(socket, &mut pending).unwrap_or(status);
                }
            }
            // A listing, -Z, ... on its own line: run it as a command
            // line (ipvsadm does), its output and status.
            Ok(None) => {
                apply_each(socket, &mut pending);
                let args: Vec<String> = line
                    .split([' ', '\t', '\r', '\n'])
                    .filter(|t| !t.is_empty() && *t != "ipvsadm")
                    .map(str::to_owned)
                    .collect();
                status = match run(args, socket) {
                    Ok(()) => 0,
                    Err(Fail(msg, code)) => {
                        if !msg.is_empty() {
                            eprintln!("{msg}");
                        }
                        code
                    }
                };
            }
            Err(e) => {
                apply_each(socket, &mut pending);
                eprintln!("{}", error_text(&Command::Clear, &e));
                status = KERNEL_ERROR_EXIT;
            }
        }
    }
    status = apply_each(socket, &mut pending).unwrap_or(status);
    if status == 0 {
        Ok(())
    } else {
        Err(Fail(String::new(), status))
    }
}

/// Rules of `-R` sent to rvsd in one [`Request::ExecEach`]: a restore of
/// tens of thousands of lines is a few hundred exchanges, each answered
/// once the data plane carried it out, instead of one exchange and one
/// wait per line (60,000 lines took 102 s on the sock plane so); few
/// enough that rvsd's owner task holds its lock briefly for each.
const RESTORE_BATCH: usize = 256;

/// Apply the `pending` rules, each on its own, printing each refusal as
/// ipvsadm prints the kernel's; the status of the last one (`None` when
/// nothing was pending). An rvsd that does not know [`Request::ExecEach`]
/// (an older one) gets them one by one.
fn apply_each(socket: &PathBuf, pending: &mut Vec<Command>) -> Option<i32> {
    if pending.is_empty() {
        return None;
    }
    let commands = std::mem::take(pending);
    let report = |r: Result<(), Fail>| match r {
        Ok(()) => 0,
        Err(Fail(msg, code)) => {
            eprintln!("{msg}");
            code
        }
    };
    let answers = match call(
        socket,
        &Request::ExecEach {
            commands: commands.clone(),
        },
    ) {
        Ok(Response::Each(a)) if a.len() == commands.len() => a,
        _ => {
            let mut last = 0;
            for c in commands {
                last = report(exec(socket, vec![c], false));
            }
            return Some(last);
        }
    };
    let mut last = 0;
    for (c, a) in commands.iter().zip(answers) {
        last = report(answered(std::slice::from_ref(c), a));
    }
    Some(last)
}

#[cfg(test)]
mod tests {
    use super::format_checks;

    #[test]
    fn checks_text_shows_state_weight_and_reasons() {
        let v = serde_json::json!([{
            "name": "TCP 10.0.0.1:80", "quorum": 2, "hysteresis": 0, "quorum_up": false,
            "alive_weight": 1, "sorry_active": true,
            "reals": [
                {"name": "10.0.0.2:80", "alive": true, "weight": 5, "configured_weight": 1,
                 "inhibit": false, "down_reason": null,
                 "checkers": [{"id": 1, "label": "MISC_CHECK 10.0.0.2:80", "up": true, "has_run": true,
                   "retries": 0, "last_failure": null, "last_ok": true, "last_latency_us": 1500}]},
                {"name": "10.0.0.3:80", "alive": false, "weight": 1, "configured_weight": 1,
                 "inhibit": true, "down_reason": "TCP_CHECK 10.0.0.3:80: timeout",
                 "checkers": [{"id": 2, "label": "TCP_CHECK 10.0.0.3:80", "up": false, "has_run": true,
                   "retries": 0, "last_failure": "timeout", "last_ok": false, "last_latency_us": 1000000}]},
                {"name": "10.0.0.4:80", "alive": false, "weight": 1, "configured_weight": 1,
                 "inhibit": false, "down_reason": "TCP_CHECK 10.0.0.4:80: connection refused",
                 "checkers": [{"id": 3, "label": "TCP_CHECK 10.0.0.4:80", "up": false, "has_run": false,
                   "retries": 0, "last_failure": null, "last_ok": null, "last_latency_us": null}]}
            ]
        }]);
        let out = format_checks(&v);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "TCP 10.0.0.1:80  quorum 2/0 DOWN  alive weight 1  sorry server active"
        );
        assert!(lines[1].contains("UP    weight 5 (configured 1)"), "{out}");
        assert!(lines[2].contains("last ok in 1.5ms"), "{out}");
        assert!(
            lines[3].contains("DOWN  weight 0 (inhibited)  reason: TCP_CHECK 10.0.0.3:80: timeout"),
            "{out}"
        );
        assert!(
            lines[4].contains("last failed in 1000.0ms  last failure: timeout"),
            "{out}"
        );
        assert!(lines[5].contains("DOWN  removed"), "{out}");
        assert!(lines[6].contains("not run yet"), "{out}");
        assert_eq!(
            format_checks(&serde_json::json!([])),
            "No health checkers (rvsd runs them for -f keepalived.conf)\n"
        );
    }
}
