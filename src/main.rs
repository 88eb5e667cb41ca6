// A panic in the gateway is a bug (as in the library).
#![deny(clippy::unwrap_used)]

use std::process::ExitCode;

use mcp_task_gateway::config::{Config, ConfigError};

// glibc's malloc slows down once many tasks' allocations interleave with the requests'
// (docs/benchmarks.md, run 6); jemalloc does not.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
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
    let _tracing = mcp_task_gateway::telemetry::traces::init(&config.log_format);
    // The first worker thread; `run` starts the others (`server::edge::workers`).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mcp-task-gateway: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(mcp_task_gateway::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "gateway stopped");
            eprintln!("mcp-task-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}
