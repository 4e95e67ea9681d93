//! SMTP_CHECK against a tiny scripted SMTP server.

use std::net::SocketAddr;
use std::time::Duration;

use rvs_check::probe::smtp::DEFAULT_HELO;
use rvs_check::probe::{Failure, ProbeSpec, run};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::{serve_tcp, target};

/// Greets with `banner`, answers HELO with `helo_reply`, QUIT with 221;
/// reports every line the client sent.
async fn server(
    banner: &'static str,
    helo_reply: &'static str,
) -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    serve_tcp(move |s, tx| async move {
        let (r, mut w) = s.into_split();
        let mut r = BufReader::new(r);
        if w.write_all(banner.as_bytes()).await.is_err() {
            return;
        }
        for _ in 0..4 {
            let mut line = String::new();
            let read = r.read_line(&mut line);
            match tokio::time::timeout(Duration::from_secs(5), read).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
            let _ = tx.send(line.clone());
            let answer = if line.starts_with("HELO") {
                helo_reply
            } else if line.starts_with("QUIT") {
                "221 bye\r\n"
            } else {
                "500 what\r\n"
            };
            if w.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
        }
    })
    .await
}

fn smtp(helo: &str) -> ProbeSpec {
    ProbeSpec::Smtp {
        helo_name: helo.into(),
    }
}

#[tokio::test]
async fn smtp_dialogue_passes() {
    let (addr, mut rx) = server("220 mx.test ESMTP\r\n", "250 mx.test\r\n").await;
    let r = run(&smtp(DEFAULT_HELO), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Ok(()));
    assert_eq!(rx.recv().await.unwrap(), format!("HELO {DEFAULT_HELO}\r\n"));
    assert_eq!(rx.recv().await.unwrap(), "QUIT\r\n");
}

#[tokio::test]
async fn smtp_multiline_greeting_read_to_its_end() {
    let (addr, _rx) = server(
        "220-mx.test first line\r\n220-second\r\n220 last\r\n",
        "250-mx.test\r\n250 SIZE 100\r\n",
    )
    .await;
    let r = run(&smtp("checker.example"), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Ok(()));
}

#[tokio::test]
async fn smtp_bad_greeting_and_helo() {
    let (addr, _rx) = server("554 go away\r\n", "250 ok\r\n").await;
    let r = run(&smtp(DEFAULT_HELO), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Err(Failure::Smtp("greeting 554".into())));
    assert_eq!(r.outcome.unwrap_err().to_string(), "smtp greeting 554");
    let (addr, _rx) = server("220 hi\r\n", "501 bad name\r\n").await;
    let r = run(&smtp(DEFAULT_HELO), &target(addr, 1000)).await;
    assert_eq!(r.outcome, Err(Failure::Smtp("HELO 501".into())));
    let (addr, _rx) = server("HTTP/1.1 400 Bad\r\n", "250 ok\r\n").await;
    let r = run(&smtp(DEFAULT_HELO), &target(addr, 1000)).await;
    assert!(matches!(r.outcome, Err(Failure::BadResponse(_))), "{r:?}");
}

#[tokio::test]
async fn smtp_silent_server_times_out() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let r = run(&smtp(DEFAULT_HELO), &target(addr, 300)).await;
    assert_eq!(r.outcome, Err(Failure::Timeout));
    assert!(r.latency >= Duration::from_millis(300) && r.latency < Duration::from_secs(2));
    drop(l);
}
