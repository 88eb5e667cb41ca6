// A panic in the gateway is a bug (as in the library).
#![deny(clippy::unwrap_used)]

use std::process::ExitCode;

use mcp_task_gateway::config::{Config, ConfigError};

// glibc's malloc slows down once many tasks' allocations interleave with the requests'
// (docs/benchmarks.md, run 6); jemalloc does not.
#[cfg(all(not(target_env = "msvc"), not(feature = "dhat-heap")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`: freed pages go back to the system within about
/// a quarter of a second, from a background thread, rather than stay in the process until
/// later allocations happen to purge them (jemalloc's default: 10 s, on the allocating
/// thread). After a burst of new tasks, RSS then comes back to what the tasks hold: at 64
/// client connections, 7.8 → 5.9 KB a task with 1 s (docs/benchmarks.md, run 33), and
/// 6.0–6.4 → 5.7–5.8 KB with 250 ms, at no CPU cost seen under steady load (run 35).
/// `_RJEM_MALLOC_CONF` still overrides it.
#[cfg(all(
    not(target_env = "msvc"),
    not(target_os = "macos"),
    not(feature = "dhat-heap")
))]
// SAFETY: the symbol is jemalloc's documented hook for options (`malloc_conf`, prefixed
// in this build), defined once, here; it points to a NUL-terminated string literal.
#[allow(unsafe_code)]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(c"background_thread:true,dirty_decay_ms:250".as_ptr());

/// A C string pointer jemalloc reads once at start.
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a string literal, immutable for the whole run.
#[allow(unsafe_code)]
unsafe impl Sync for MallocConf {}

// A heap profile instead (`--features dhat-heap`, never in a release): every allocation's
// call stack, written at exit to `$MTG_DHAT_FILE` (default `dhat-heap.json`); its
// "t-gmax" view is the heap at its peak, e.g. with every task of a load in flight.
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

fn main() -> ExitCode {
    #[cfg(feature = "dhat-heap")]
    let _profiler = dhat_snapshot::start();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|first| first == "admin") {
        return mcp_task_gateway::admin::cli::main(args);
    }
    let config = match Config::load() {
        Ok(config) => config,
        // Help and version go to stdout with status 0, usage errors to stderr with 2.
        Err(ConfigError::Flags(e)) => e.exit(),
        Err(e) => {
            eprintln!("mcp-task-gateway: {e}");
            return ExitCode::from(2);
        }
    };
    let _tracing = mcp_task_gateway::telemetry::traces::init(&config.operations.log_format);
    // The first worker thread; `run` starts the others (`server::edge::workers`).
    let runtime = match mcp_task_gateway::worker_runtime(config.edge.idle_poll()) {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mcp-task-gateway: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    #[cfg(feature = "dhat-heap")]
    runtime.spawn(dhat_snapshot::on_sigusr2(_profiler));
    match runtime.block_on(mcp_task_gateway::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "gateway stopped");
            eprintln!("mcp-task-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The heap profile, written at exit or at once on SIGUSR2: its peak is then the heap as
/// it is, e.g. with every task of a load in flight, not a later burst (a teardown's).
#[cfg(feature = "dhat-heap")]
mod dhat_snapshot {
    use std::sync::{Arc, Mutex, PoisonError};

    pub(crate) type Held = Arc<Mutex<Option<dhat::Profiler>>>;

    pub(crate) fn start() -> Held {
        let profiler = dhat::Profiler::builder()
            .file_name(std::env::var_os("MTG_DHAT_FILE").unwrap_or_else(|| "dhat-heap.json".into()))
            .trim_backtraces(Some(60))
            .build();
        Arc::new(Mutex::new(Some(profiler)))
    }

    pub(crate) async fn on_sigusr2(held: Held) {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut usr2) = signal(SignalKind::user_defined2()) else {
            return;
        };
        if usr2.recv().await.is_some() {
            // Dropping the profiler writes its file.
            drop(held.lock().unwrap_or_else(PoisonError::into_inner).take());
            eprintln!("mcp-task-gateway: heap profile written (SIGUSR2)");
        }
    }
}
