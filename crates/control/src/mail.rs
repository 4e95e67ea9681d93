//! keepalived's `smtp_alert` mail as a plan: which server, sender,
//! recipients and subject tag a file names ([`Mailer::of`]). The host
//! name and the user are arguments (the daemon reads them); sending is the
//! daemon's.

use std::time::Duration;

use rvs_config::model::GlobalDefs;

/// Where and how alerts are mailed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mailer {
    /// `smtp_server HOST [PORT]` (port 25 by default).
    pub server: (String, u16),
    /// `smtp_helo_name`, else the host name.
    pub helo: String,
    /// `notification_email_from`, else `USER@HOST`.
    pub from: String,
    /// `notification_email { }`.
    pub to: Vec<String>,
    /// `smtp_connect_timeout`.
    pub timeout: Duration,
    /// `router_id`, else the host name: the subject's `[...]`.
    pub router_id: String,
}

impl Mailer {
    /// The mailer `global_defs` describes on host `hostname` for `user`
    /// (rvsd's effective user); `None` without recipients or a server
    /// (keepalived then sends nothing either).
    pub fn of(g: &GlobalDefs, hostname: &str, user: &str) -> Option<Mailer> {
        let (host, port) = g.smtp_server.clone()?;
        if g.notification_email.is_empty() {
            return None;
        }
        Some(Mailer {
            server: (host, port.unwrap_or(25)),
            helo: g
                .smtp_helo_name
                .clone()
                .unwrap_or_else(|| hostname.to_owned()),
            from: g
                .notification_email_from
                .clone()
                .unwrap_or_else(|| format!("{user}@{hostname}")),
            to: g.notification_email.clone(),
            timeout: g.smtp_connect_timeout.unwrap_or(Duration::from_secs(30)),
            router_id: g.router_id.clone().unwrap_or_else(|| hostname.to_owned()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mailer(global: &str) -> Option<Mailer> {
        let l = rvs_config::parse_str(
            "t.conf",
            &format!("global_defs {{\n{global}}}\n"),
            &Default::default(),
        )
        .unwrap();
        Mailer::of(&l.config.global, "lb1", "root")
    }

    #[test]
    fn the_mailer_is_the_file_s_with_keepalived_defaults() {
        let to = " notification_email {\n  a@example.com\n }\n";
        assert_eq!(mailer(to), None, "no smtp_server");
        assert_eq!(mailer(" smtp_server 192.0.2.25\n"), None, "nobody to mail");
        let m = mailer(&format!(" smtp_server 192.0.2.25\n{to}")).unwrap();
        assert_eq!(m.server, ("192.0.2.25".to_owned(), 25));
        assert_eq!(
            (m.helo.as_str(), m.from.as_str(), m.router_id.as_str()),
            ("lb1", "root@lb1", "lb1")
        );
        assert_eq!(m.timeout, Duration::from_secs(30));
        let m = mailer(&format!(
            " smtp_server 192.0.2.25 2525\n{to} notification_email_from lb@example.com\n smtp_helo_name h\n router_id R\n smtp_connect_timeout 5\n"
        ))
        .unwrap();
        assert_eq!(m.server.1, 2525);
        assert_eq!(
            (m.helo.as_str(), m.from.as_str(), m.router_id.as_str()),
            ("h", "lb@example.com", "R")
        );
        assert_eq!(m.timeout, Duration::from_secs(5));
        assert_eq!(m.to, ["a@example.com"]);
    }
}
