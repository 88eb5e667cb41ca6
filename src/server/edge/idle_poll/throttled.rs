//! Whether the gateway's own cgroup ran out of CPU lately: a container whose CPU limit
//! (its CFS quota) was used up before the period ended, so that its threads waited for
//! the next one. A polling worker spends quota that requests need, and the machine-wide
//! pressure does not show a container's own limit; so a worker whose cgroup was
//! throttled stops polling for a while.

use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long polling stays off after the cgroup was last seen throttled: several CFS
/// periods (100 ms by default), so that polling does not flap at the limit.
pub(super) const HOLD: Duration = Duration::from_secs(1);

/// The cgroup's `cpu.stat`, read on demand.
pub(super) struct Throttling {
    /// `None` when the process is in no cgroup with a CPU controller: nothing limits it.
    file: Option<File>,
    /// `nr_throttled` at the last reading.
    last: Option<u64>,
    /// When the hold after the last throttling ends.
    until: Option<Instant>,
}

impl Throttling {
    pub(super) fn new() -> Self {
        Self::at(cpu_stat_file())
    }

    fn at(file: Option<File>) -> Self {
        Self {
            file,
            last: None,
            until: None,
        }
    }

    /// Whether the cgroup was throttled within [`HOLD`] of `now`, as far as a new
    /// reading of its counter shows.
    pub(super) fn recent(&mut self, now: Instant) -> bool {
        let Some(count) = self.file.as_ref().and_then(read_nr_throttled) else {
            return false;
        };
        if self.last.is_some_and(|before| count > before) {
            self.until = Some(now + HOLD);
        }
        self.last = Some(count);
        self.until.is_some_and(|until| now < until)
    }
}

/// The first `cpu.stat` among [`candidates`] that counts throttling.
fn cpu_stat_file() -> Option<File> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    candidates(&cgroups)
        .into_iter()
        .filter_map(|path| File::open(path).ok())
        .find(|file| read_nr_throttled(file).is_some())
}

/// Where the process's `cpu.stat` may be, from `/proc/self/cgroup`: under the cgroup v2
/// hierarchy (line `0::PATH`) or v1's `cpu` controller (`N:cpu,cpuacct:PATH`), at
/// the process's own path, then at the mount's root, which is what a container without
/// its own cgroup namespace sees of its cgroup.
fn candidates(proc_self_cgroup: &str) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let roots: &[&str] = if controllers.is_empty() {
            &["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        } else if controllers.split(',').any(|c| c == "cpu") {
            &["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"]
        } else {
            continue;
        };
        let path = path.trim_end_matches('/');
        for root in roots {
            paths.push(PathBuf::from(format!("{root}{path}/cpu.stat")));
        }
        for root in roots {
            paths.push(PathBuf::from(format!("{root}/cpu.stat")));
        }
    }
    paths
}

fn read_nr_throttled(file: &File) -> Option<u64> {
    nr_throttled(super::read_text(file, &mut [0u8; 1024])?)
}

/// The `nr_throttled` count of a `cpu.stat` (the same key in cgroup v1 and v2).
fn nr_throttled(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("nr_throttled "))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn the_count_is_read_from_v1_and_v2_cpu_stat() {
        let v2 = "usage_usec 9\nuser_usec 5\nsystem_usec 4\nnr_periods 12\nnr_throttled 3\nthrottled_usec 700\n";
        let v1 = "nr_periods 12\nnr_throttled 4\nthrottled_time 9000\n";
        assert_eq!(nr_throttled(v2), Some(3));
        assert_eq!(nr_throttled(v1), Some(4));
        // A v2 cgroup without the cpu controller has no such line.
        assert_eq!(nr_throttled("usage_usec 9\nuser_usec 5\n"), None);
    }

    #[test]
    fn candidates_follow_the_process_cgroup_then_the_mount_root() {
        let hybrid = "4:memory:/x\n1:cpu,cpuacct:/kubepods/pod1/c1\n0::/kubepods/pod1/c1\n";
        let paths: Vec<_> = candidates(hybrid)
            .into_iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            paths,
            [
                "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1/cpu.stat",
                "/sys/fs/cgroup/cpu/kubepods/pod1/c1/cpu.stat",
                "/sys/fs/cgroup/cpu,cpuacct/cpu.stat",
                "/sys/fs/cgroup/cpu/cpu.stat",
                "/sys/fs/cgroup/kubepods/pod1/c1/cpu.stat",
                "/sys/fs/cgroup/unified/kubepods/pod1/c1/cpu.stat",
                "/sys/fs/cgroup/cpu.stat",
                "/sys/fs/cgroup/unified/cpu.stat",
            ]
        );
        // A container in its own namespace sees its cgroup as the root.
        assert_eq!(
            candidates("0::/\n")[0].display().to_string(),
            "/sys/fs/cgroup/cpu.stat"
        );
    }

    #[test]
    fn a_rise_in_the_count_holds_polling_off_for_a_while() {
        let dir = std::env::temp_dir().join(format!("mtg-throttled-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cpu.stat");
        let write = |count: u64| {
            let mut file = File::create(&path).unwrap();
            writeln!(
                file,
                "nr_periods 50\nnr_throttled {count}\nthrottled_time 1"
            )
            .unwrap();
        };
        write(7);
        let mut throttling = Throttling::at(File::open(&path).ok());
        let start = Instant::now();
        assert!(
            !throttling.recent(start),
            "the first reading only starts the count"
        );
        assert!(!throttling.recent(start + Duration::from_millis(10)));
        write(8);
        assert!(throttling.recent(start + Duration::from_millis(20)));
        assert!(throttling.recent(start + Duration::from_millis(20) + HOLD / 2));
        assert!(!throttling.recent(start + Duration::from_millis(21) + HOLD));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_a_cpu_cgroup_nothing_is_throttled() {
        assert!(!Throttling::at(None).recent(Instant::now()));
    }
}
