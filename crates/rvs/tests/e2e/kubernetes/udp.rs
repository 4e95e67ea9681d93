//! UDP Services on the sock plane (`rvsd --dataplane sock --cgroup CG
//! --kubernetes`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Stdio};

use super::{Node, WAIT, app_pod, ip, nodes, real_servers_of, service_addrs, setup};
use crate::harness::within;
use rvs_testbed::Bed;

/// The client process, killed when the test ends (also on failure).
struct Client(Child);

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 28's "a connected UDP socket follows its backend's deletion"
/// (Cilium keeps it on the deleted backend: cilium#48096, #12859). A
/// client in the node's cgroup holds one connected UDP socket to a UDP
/// ClusterIP (bash's `/dev/udp`: `connect()`, rewritten at the socket to a
/// pod); the pod that answered is deleted; the socket's pending receive
/// fails with ECONNABORTED, and the client's reconnect reaches the other
/// pod.
#[test]
fn kubernetes_sock_connected_udp_follows_its_backends_deletion() {
    let test = "kubernetes_sock_connected_udp_follows_its_backends_deletion";
    if rvs_testbed::is_root()
        && (!rvs_testbed::require_cgroup2(test)
            || !rvs_testbed::require_tools(test, &["bash", "dd", "timeout"]))
    {
        return;
    }
    let Some(cp) = setup(test) else { return };
    let mut bed = Bed::new("k8sux");
    let node = bed.host("node", "10.81.0.1/24");
    let pods = [("pod1", "10.81.0.11"), ("pod2", "10.81.0.12")];
    nodes(&cp, &[("node1", "10.81.0.1")]);
    for (name, addr) in pods {
        let h = bed.host(name, &format!("{addr}/24"));
        bed.udp_server(&h, ip(addr), 5353, name);
        app_pod(&cp, name, "node1", addr, "dns");
    }
    cp.apply(
        r#"{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "dns", "namespace": "default"},
 "spec": {"selector": {"app": "dns"},
          "ports": [{"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}]}}"#,
    )
    .expect("create service");
    let (cip, _) = service_addrs(&cp, "default", "dns");
    let cluster = SocketAddr::new(cip, 53);
    let cg = rvs_testbed::Cgroup::new("rvsk8sudp");
    let cgroup = cg.path().to_str().expect("utf-8").to_owned();
    let n = Node::start(&cp, &node, "node1", "sock", &["--cgroup", &cgroup]);
    let d = &n.rvsd;
    within("the ClusterIP's two endpoints in rvsadm -Ln", WAIT, || {
        real_servers_of(d, "UDP", cluster).len() == 2
    });

    // One connected socket (fd 3) asked once; then, told to go on, a
    // receive on it (nothing sent: only an error ends it early), and the
    // socket connected again and asked.
    let script = format!(
        r#"exec 3<>/dev/udp/{cip}/53
ask() {{ echo ping >&3; timeout 5 dd bs=256 count=1 status=none <&3 2>&1 || echo "rc=$?"; }}
echo "before $(ask)"
read go
echo "after $(timeout 10 dd bs=256 count=1 status=none <&3 2>&1 || echo "rc=$?")"
exec 3<&-
exec 3<>/dev/udp/{cip}/53
echo "again $(ask)"
"#
    );
    let mut client = Client(
        std::process::Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{}", node.ns))
            .args([
                "sh",
                "-c",
                r#"echo $$ > "$0/cgroup.procs" && exec bash -c "$1""#,
            ])
            .arg(&cgroup)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("bash"),
    );
    let mut out = BufReader::new(client.0.stdout.take().expect("stdout"));
    let mut before = String::new();
    out.read_line(&mut before).expect("read");
    let first = match before.trim() {
        "before pod1 ping" => "pod1",
        "before pod2 ping" => "pod2",
        other => panic!("the first answer: {other:?}"),
    };
    let other = if first == "pod1" { "pod2" } else { "pod1" };

    // The pod that answered goes at once (its server keeps running in its
    // namespace: a socket left on it would still be answered).
    cp.kubectl(
        &[
            "delete",
            "pod",
            first,
            "-n",
            "default",
            "--grace-period=0",
            "--force",
        ],
        None,
    )
    .expect("delete the pod");
    within("one endpoint left in rvsadm -Ln", WAIT, || {
        real_servers_of(d, "UDP", cluster).len() == 1
    });
    client
        .0
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("write");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("read");
    assert!(client.0.wait().expect("wait").success(), "{rest}");
    // `after dd: error reading 'standard input': Software caused connection
    // abort` (and dd's `rc=1`), then the reconnected socket's answer.
    let lines: Vec<&str> = rest.lines().collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("after ") && l.contains("connection abort")),
        "the socket on the deleted pod gets ECONNABORTED: {rest}"
    );
    assert_eq!(
        lines.last().copied(),
        Some(format!("again {other} ping").as_str()),
        "{rest}"
    );
}
