//! CPU affinity and real-time scheduling of the calling thread (the
//! traffic generator and the benchmarks pin threads).

use std::io;

/// The CPUs the calling thread may run on.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t and its exact size is passed; the
    // kernel writes at most that.
    if unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET only reads the set, for indexes below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pin the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is beyond CPU_SETSIZE"),
        ));
    }
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE (checked above), so CPU_SET writes
    // inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a live cpu_set_t and its exact size is passed.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Make the calling thread `SCHED_FIFO` at `priority` (1-99; needs root
/// or CAP_SYS_NICE).
pub fn set_fifo(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a live sched_param the kernel only reads.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Let a write to a closed pipe end the process, as it ends a C program
/// (`rvsadm -Ln | head`, like `ipvsadm -Ln | head`): Rust's runtime
/// ignores SIGPIPE, so `print!` would panic on EPIPE instead.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler
    // and touches no memory; the previous disposition is not needed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_narrows_the_allowed_set() {
        let before = allowed_cpus().unwrap();
        assert!(!before.is_empty());
        let cpu = before[before.len() - 1];
        let t = std::thread::spawn(move || {
            pin_to_cpu(cpu).unwrap();
            allowed_cpus().unwrap()
        });
        assert_eq!(t.join().unwrap(), vec![cpu]);
        assert!(pin_to_cpu(usize::MAX).is_err());
        assert!(set_fifo(1000).is_err(), "priority out of range");
    }
}
