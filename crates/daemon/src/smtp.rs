//! keepalived's `smtp_alert` e-mail for VRRP transitions: one mail per
//! transition of an instance whose `smtp_alert` is on (else the global
//! `smtp_alert_vrrp`, else `smtp_alert`); and for the health checker (a
//! checker's change of a real server whose `smtp_alert` is on, a virtual
//! server's quorum change: [`checker_alert`]); to every `notification_email`
//! address, from `notification_email_from`, through `smtp_server`, with
//! keepalived's subject (`[ROUTER_ID] VRRP Instance NAME - Entering MASTER
//! state`), body (`=> VRRP Instance is now owning VRRP VIPs <=`) and
//! headers (`X-Mailer: Keepalived`).
//!
//! Which server and addresses is [`rvs_control::mail`]'s plan; each mail
//! is its own tokio task speaking SMTP (HELO, MAIL FROM, RCPT TO
//! for each address, DATA, QUIT) with `smtp_connect_timeout` (default 30 s)
//! bounding every step: a slow or dead mail server never delays an
//! advertisement.

use std::sync::Mutex;

use rvs_config::model::GlobalDefs;
use rvs_core::vrrp::State;
use tokio::io::{AsyncWriteExt, BufReader};

pub use rvs_control::mail::Mailer;

/// The mailer `global_defs` describes ([`Mailer::of`]) on this host, as
/// rvsd's effective user.
pub fn mailer(g: &GlobalDefs) -> Option<Mailer> {
    // Without a server nothing is mailed: the host and user are not read.
    g.smtp_server.as_ref()?;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    let user = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map_or_else(|| "root".to_owned(), |u| u.name);
    Mailer::of(g, &hostname, &user)
}

/// The mailer of the running configuration.
static MAILER: Mutex<Option<Mailer>> = Mutex::new(None);

/// Take the mailer of a (re)loaded configuration.
pub fn configure(m: Option<Mailer>) {
    if let Ok(mut cur) = MAILER.lock() {
        *cur = m;
    }
}

/// keepalived's subject ending and body for an instance entering `to`.
pub fn vrrp_text(to: State) -> Option<(&'static str, &'static str)> {
    Some(match to {
        State::Master => (
            "Entering MASTER state",
            "=> VRRP Instance is now owning VRRP VIPs <=",
        ),
        State::Backup => (
            "Entering BACKUP state",
            "=> VRRP Instance is no longer owning VRRP VIPs <=",
        ),
        State::Fault => (
            "Entering FAULT state",
            "=> VRRP Instance is no longer owning VRRP VIPs <=",
        ),
        State::Stopped => ("Stopping", "=> VRRP Instance stopping <="),
        State::Init => return None,
    })
}

/// Mail instance `name`'s transition to `to` (in the background).
pub fn vrrp_alert(name: &str, to: State) {
    let Some((what, body)) = vrrp_text(to) else {
        return;
    };
    let Some(m) = MAILER.lock().ok().and_then(|m| m.clone()) else {
        return;
    };
    let subject = format!("[{}] VRRP Instance {name} - {what}", m.router_id);
    spawn(m, subject, body.to_owned());
}

/// Mail a health-check alert (a real server's checker changed, a virtual
/// server's quorum was lost or gained): `subject` is keepalived's after
/// `[ROUTER_ID] ` ([`rvs_check::policy::Action::Mail`]).
pub fn checker_alert(subject: &str, body: &str) {
    let Some(m) = MAILER.lock().ok().and_then(|m| m.clone()) else {
        return;
    };
    let subject = format!("[{}] {subject}", m.router_id);
    spawn(m, subject, body.to_owned());
}

/// Send one mail in its own task: never waits on the mail server.
fn spawn(m: Mailer, subject: String, body: String) {
    if tokio::runtime::Handle::try_current().is_err() {
        tracing::warn!(target: "rvs::smtp", "SMTP alert `{subject}` not sent: no runtime");
        return;
    }
    tokio::spawn(async move {
        match send(&m, &subject, &body).await {
            Ok(()) => tracing::info!(target: "rvs::smtp", "SMTP alert successfully sent."),
            Err(e) => {
                tracing::warn!(target: "rvs::smtp", "SMTP alert to {}:{} not sent: {e}", m.server.0, m.server.1)
            }
        }
    });
}

/// The message (headers, body, the final dot), as keepalived writes it.
pub fn message(m: &Mailer, date: &str, subject: &str, body: &str) -> String {
    let mut text = String::new();
    for line in body.lines() {
        // Dot-stuffing (RFC 5321 §4.5.2).
        if line.starts_with('.') {
            text.push('.');
        }
        text.push_str(line);
        text.push_str("\r\n");
    }
    format!(
        "Date: {date}\r\nFrom: {}\r\nSubject: {subject}\r\nX-Mailer: Keepalived\r\nTo: {}\r\n\r\n{text}\r\n.\r\n",
        m.from,
        m.to.join(", ")
    )
}

/// RFC 5322 date of `secs` since the epoch, in UTC.
pub fn rfc822(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} +0000",
        DAYS[(days % 7) as usize],
        d,
        MONTHS[(mo - 1) as usize],
        y,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// One SMTP conversation delivering `subject`/`body` to every recipient.
async fn send(m: &Mailer, subject: &str, body: &str) -> Result<(), String> {
    let t = m.timeout;
    let step = |what: &'static str| move |_| format!("{what}: timed out after {t:?}");
    let addr = format!("{}:{}", m.server.0, m.server.1);
    let stream = tokio::time::timeout(t, tokio::net::TcpStream::connect(&addr))
        .await
        .map_err(step("connect"))?
        .map_err(|e| format!("connect: {e}"))?;
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut expect = async |code: u16, what: &'static str| -> Result<(), String> {
        let got = rvs_check::probe::smtp::reply(&mut r, t)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        if got == code {
            Ok(())
        } else {
            Err(format!("{what}: SMTP status code = {got}"))
        }
    };
    expect(220, "greeting").await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut cmds: Vec<(String, u16, &'static str)> = vec![
        (format!("HELO {}\r\n", m.helo), 250, "HELO"),
        (format!("MAIL FROM:<{}>\r\n", m.from), 250, "MAIL"),
    ];
    for to in &m.to {
        cmds.push((format!("RCPT TO:<{to}>\r\n"), 250, "RCPT"));
    }
    cmds.push(("DATA\r\n".into(), 354, "DATA"));
    cmds.push((message(m, &rfc822(now), subject, body), 250, "DOT"));
    for (line, code, what) in cmds {
        tokio::time::timeout(t, w.write_all(line.as_bytes()))
            .await
            .map_err(step(what))?
            .map_err(|e| format!("{what}: {e}"))?;
        expect(code, what).await?;
    }
    let _ = tokio::time::timeout(t, w.write_all(b"QUIT\r\n")).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn dates_and_messages_are_keepalived_s() {
        assert_eq!(rfc822(0), "Thu, 01 Jan 1970 00:00:00 +0000");
        assert_eq!(rfc822(1_709_251_199), "Thu, 29 Feb 2024 23:59:59 +0000");
        let m = Mailer {
            server: ("127.0.0.1".into(), 25),
            helo: "h".into(),
            from: "lb@example.com".into(),
            to: vec!["a@example.com".into(), "b@example.com".into()],
            timeout: Duration::from_secs(1),
            router_id: "LB1".into(),
        };
        assert_eq!(
            message(&m, "D", "S", "=> x <=\n.dot"),
            "Date: D\r\nFrom: lb@example.com\r\nSubject: S\r\nX-Mailer: Keepalived\r\nTo: a@example.com, b@example.com\r\n\r\n=> x <=\r\n..dot\r\n\r\n.\r\n"
        );
        assert_eq!(vrrp_text(State::Init), None);
    }
}
