use clap::Parser;
use mcp_task_gateway::config::Config;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = Config::parse();
    init_tracing(&config.log_format);
    match mcp_task_gateway::run(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "gateway stopped");
            eprintln!("mcp-task-gateway: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
