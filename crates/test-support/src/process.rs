//! Child processes, ports and start-and-wait.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a process may take to start, and a test to see what it waits for.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// A child process in a process group of its own, stopped with that group when dropped,
/// so that what it started (npx's node, a wrapper's program, a stdio server) stops too.
/// With a `grace`, the group gets SIGTERM first and SIGKILL only after it (a gateway under
/// valgrind must exit by itself to write its report).
pub struct Proc {
    pub child: Child,
    pub name: String,
    pub grace: Duration,
}

impl Proc {
    pub fn spawn(mut command: Command, name: &str) -> std::io::Result<Self> {
        let child = command.process_group(0).spawn()?;
        Ok(Self {
            child,
            name: name.to_owned(),
            grace: Duration::ZERO,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the whole process group.
    pub fn signal_group(&self, signal: libc::c_int) {
        let group = -(self.child.id() as libc::pid_t);
        // SAFETY: kill(2) with plain integers, on the group this child leads (set at spawn).
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(group, signal);
        }
    }

    /// Stops the group at once (SIGKILL) and reaps the child.
    pub fn kill(&mut self) {
        self.signal_group(libc::SIGKILL);
        let _ = self.child.wait();
    }

    fn stop_within_grace(&mut self) -> bool {
        self.signal_group(libc::SIGTERM);
        let deadline = Instant::now() + self.grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "{} did not stop within {:?}; killing it",
            self.name, self.grace
        );
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.grace.is_zero() && self.stop_within_grace() {
            return;
        }
        self.kill();
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// Waits until something accepts connections on the loopback `port`.
pub fn wait_for_port(port: u16, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("nothing listens on port {port} after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Spawns `command` and waits for its stdout line `listening on URL`; returns the
/// process and the URL. Stdout after that line is drained in the background; stderr is
/// left as the caller set it (inherited by default).
pub fn spawn_announcing(name: &str, mut command: Command, limit: Duration) -> (Proc, String) {
    command.stdin(Stdio::null()).stdout(Stdio::piped());
    let mut proc =
        Proc::spawn(command, name).unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    let stdout = proc.child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let Ok(line) = line else { return };
            if let Some(url) = line.strip_prefix("listening on ") {
                let _ = tx.send(url.trim().to_owned());
                break;
            }
        }
        for _ in lines {}
    });
    let url = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{name} did not announce its address within {limit:?}"));
    (proc, url)
}

/// Living direct children of `parent`, from /proc, in PID order.
pub fn children_of(parent: u32) -> Vec<u32> {
    let mut children = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return children;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state, ppid, ...
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) && state != Some("Z") {
            children.push(pid);
        }
    }
    children.sort_unstable();
    children
}

/// Every living descendant of `pid`, children before grandchildren.
pub fn descendants_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        for child in children_of(parent) {
            found.push(child);
            next.push(child);
        }
    }
    found
}
