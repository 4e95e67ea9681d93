//! The namespace guard: a unique namespace that code can enter, gone after
//! the guard drops, also when the test panics.

use std::path::Path;

use rvs_testbed::{Netns, require_root, require_tools};

/// The interfaces the calling thread's network namespace has.
fn interfaces() -> Vec<String> {
    let dev = std::fs::read_to_string("/proc/thread-self/net/dev").expect("net/dev");
    dev.lines()
        .skip(2)
        .filter_map(|l| l.split(':').next().map(|n| n.trim().to_owned()))
        .collect()
}

#[test]
fn namespaces_are_unique_entered_on_their_own_thread_and_removed_on_drop() {
    let test = "namespaces_are_unique_entered_on_their_own_thread_and_removed_on_drop";
    if !require_root(test, "network namespaces need root") || !require_tools(test, &["ip"]) {
        return;
    }
    let (a, b) = (Netns::new("tb"), Netns::new("tb"));
    assert_ne!(a.name(), b.name());
    assert!(Path::new(&a.path()).exists());
    assert_eq!(a.run(interfaces), ["lo"]);
    a.exec(&[
        "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1",
    ]);
    assert_eq!(a.run(interfaces).len(), 3, "the veth pair is in a");
    assert_eq!(b.run(interfaces), ["lo"], "and not in b");
    let path = a.path();
    drop(a);
    assert!(!Path::new(&path).exists(), "{path} outlived its guard");

    let kept = std::sync::Mutex::new(String::new());
    let panicked = std::panic::catch_unwind(|| {
        let ns = Netns::new("tb");
        *kept.lock().unwrap() = ns.path();
        ns.run(|| panic!("a failing test inside the namespace"));
    });
    assert!(panicked.is_err(), "the panic inside reaches the test");
    let path = kept.into_inner().unwrap();
    assert!(
        !path.is_empty() && !Path::new(&path).exists(),
        "{path} left behind"
    );
}
