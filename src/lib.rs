//! mcp-task-gateway: a reverse proxy that gives plain MCP servers the Tasks extension.
//!
//! Requests flow one way: `server` (HTTP) → `tasks` (task lifecycle) → the `mtg_store`
//! crate (task state) and `upstream` (the plain MCP server). The `mtg_protocol` crate
//! (MCP shapes, names and rules) is a leaf every layer uses, the store included; the
//! `mtg_transport` crate (the outbound HTTP: pinned connections, the lean HTTP/1.1
//! client, the HTTP/2 pool) is the leaf `server`, `upstream` and `auth` send through.

// A panic in a request or a runner is a bug; unit tests may unwrap. (unsafe_code is
// denied in Cargo.toml's [lints].)
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod admin;
mod auth;
mod cluster;
pub mod config;
mod server;
mod settings;
pub mod tasks;
pub mod telemetry;
mod upstream;
mod webhooks;

/// The runtime of a worker thread; `main` builds the first one with it.
pub use server::edge::idle_poll::worker_runtime;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use cluster::Membership;
use config::Config;
use mtg_store::Store;
use mtg_store::memory::MemoryStore;
use mtg_store::redis::{RedisStore, StoreNamespace, Target};
use tasks::TaskService;
use tasks::takeover::Takeovers;

/// Runs the gateway until SIGTERM or Ctrl-C. Call it on a current-thread runtime: it
/// is the first of the worker threads (`server::edge::workers`).
pub async fn run(config: Config) -> std::io::Result<()> {
    // Two rustls providers are linked (ring, and aws-lc-rs through a dependency), so
    // none is the default until one is named: `rediss://` connections need it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let operators = Operators::open(&config).await?;
    let listener = TcpListener::bind(config.edge.listen).await?;
    let local = listener.local_addr()?;
    let client = mtg_transport::client();
    let call_client =
        mtg_transport::call_client(config.upstream.upstream_read_buffer_bytes as usize);
    let redis = connect_redis(&config)?;
    let closing = tokio_util::sync::CancellationToken::new();
    let edge = Arc::new(server::Edge::start(settings::edge(&config))?);
    let auth = settings::auth(&config)
        .map(|auth| Arc::new(auth::Authenticator::new(auth, client.clone())));
    let shared = Shared {
        call_client: &call_client,
        client: &client,
        redis: redis.as_ref(),
        edge: &edge,
        auth: auth.as_ref(),
        closing: &closing,
        namespace_given: config.store.store_namespace.is_some(),
        running_counts: tasks::limits::RunningCounts::default(),
    };
    let worlds = start_worlds(&config, &shared).await?;
    if let Some(operators) = operators {
        operators.serve(&worlds, &config)?;
    }
    let routes = Arc::new(routes_to(edge, &worlds));
    announce_ready(&config, local);
    let stop = async move {
        shutdown_signal().await;
        closing.cancel();
    };
    let workers = server::edge::workers::serve(
        listener,
        routes,
        config.edge.worker_threads(),
        config.edge.idle_poll(),
        stop,
    )
    .await?;
    let drain_timeout = Duration::from_millis(config.operations.drain_timeout_ms);
    // Each world drains at once: the drain timeout is the whole stop's, not each one's.
    futures_util::future::join_all(
        worlds
            .into_iter()
            .map(|world| world.stop(drain_timeout, &config.cluster.instance_id)),
    )
    .await;
    workers.stop().await;
    tracing::info!("stopped");
    Ok(())
}

/// The metrics listener (`--metrics-listen`) and the admin API's token, if any
/// (`--admin-token-file`): opened before anything else, served once the worlds exist.
struct Operators {
    listener: TcpListener,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    token: Option<String>,
}

impl Operators {
    async fn open(config: &Config) -> std::io::Result<Option<Self>> {
        let token = config
            .operations
            .admin_token_file
            .as_deref()
            .map(admin::read_token)
            .transpose()?;
        let Some(addr) = config.operations.metrics_listen else {
            return Ok(None);
        };
        let listener = admin::bind(addr).await?;
        let metrics = telemetry::install_metrics().map_err(std::io::Error::other)?;
        Ok(Some(Self {
            listener,
            metrics,
            token,
        }))
    }

    /// Serves `/metrics`, and the admin API over every world's tasks.
    fn serve(self, worlds: &[World], config: &Config) -> std::io::Result<()> {
        let addr = self.listener.local_addr()?;
        let api = self.token.map(|token| admin::AdminApi {
            admins: worlds
                .iter()
                .map(|world| {
                    (
                        world.name().unwrap_or_default().to_owned(),
                        world.admin(config),
                    )
                })
                .collect(),
            console: admin::console::Console::new(
                settings::console(config),
                token.clone(),
                worlds
                    .iter()
                    .map(|world| world.console_view(config))
                    .collect(),
            ),
            token,
        });
        tracing::info!(%addr, admin = api.is_some(), "serving Prometheus metrics at /metrics");
        admin::serve(self.listener, self.metrics, api);
        Ok(())
    }
}

/// The shared store's connection, if one is configured: every upstream's world shares
/// it, under its own namespace.
fn connect_redis(config: &Config) -> std::io::Result<Option<Arc<RedisStore>>> {
    let redis = settings::redis(config)?;
    if config.bridge.request_state_key.is_none() && redis.is_some() {
        tracing::warn!(
            "no --request-state-key: held calls can be resumed only on the instance that \
             holds them; set the same key on every instance"
        );
    }
    redis
        .map(|settings| RedisStore::connect(settings).map_err(std::io::Error::other))
        .transpose()
}

/// The world of the upstream at `/mcp`, if there is one, then each named upstream's.
async fn start_worlds(config: &Config, shared: &Shared<'_>) -> std::io::Result<Vec<World>> {
    let mut worlds = Vec::new();
    if config.upstream.url.is_some() || config.upstream.upstream_cmd.is_some() {
        worlds.push(World::start(None, config, shared).await?);
    }
    for named in &config.upstream.named {
        let world_config = config.for_upstream(named);
        worlds.push(World::start(Some(named.name.clone()), &world_config, shared).await?);
    }
    Ok(worlds)
}

/// Each path to its world's gateway: `/mcp` and `/mcp/NAME`.
fn routes_to(edge: Arc<server::Edge>, worlds: &[World]) -> server::Routes {
    let mut default = None;
    let mut named = std::collections::HashMap::new();
    for world in worlds {
        match world.name() {
            None => default = Some(world.gateway.clone()),
            Some(name) => {
                named.insert(name.to_owned(), world.gateway.clone());
            }
        }
    }
    server::Routes::new(edge, default, named)
}

/// Logs what serves where, and prints the address tests and scripts wait for.
fn announce_ready(config: &Config, local: std::net::SocketAddr) {
    let store_kind = match settings::redis_target(config) {
        None => "memory",
        Some(Target::Server(_)) => "redis",
        Some(Target::Cluster(_)) => "redis-cluster",
        Some(Target::Sentinel(_)) => "redis-sentinel",
    };
    tracing::info!(listen = %local, upstream = %describe_upstream(config), named = config.upstream.named.len(), instance = %config.cluster.instance_id, store = store_kind, "mcp-task-gateway ready");
    // Tests and scripts read the bound address from this line (the port may be 0).
    let scheme = if config.edge.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    println!("listening on {scheme}://{local}/mcp");
}

/// What every upstream's world is built with.
struct Shared<'a> {
    call_client: &'a mtg_transport::Http1Client,
    client: &'a mtg_transport::HttpClient,
    redis: Option<&'a Arc<RedisStore>>,
    edge: &'a Arc<server::Edge>,
    auth: Option<&'a Arc<auth::Authenticator>>,
    closing: &'a tokio_util::sync::CancellationToken,
    /// Whether `--store-namespace` was given (else each namespace is derived).
    namespace_given: bool,
    /// `--max-running-tasks-per-principal` counts a caller's tasks of every upstream.
    running_counts: tasks::limits::RunningCounts,
}

/// One upstream and everything of its own: the store namespace, the task service, its
/// takeovers and lease, and the `Gateway` serving its path.
struct World {
    gateway: Arc<server::Gateway>,
    store: Store,
    webhooks: crate::webhooks::Webhooks,
    store_namespace: Option<String>,
    tasks: Arc<TaskService>,
    takeovers: Arc<Takeovers>,
    membership: Membership,
    upstream: Arc<dyn upstream::Upstream>,
}

impl World {
    /// `config` is the world's own (`Config::for_upstream` for a named upstream).
    async fn start(
        name: Option<String>,
        config: &Config,
        shared: &Shared<'_>,
    ) -> std::io::Result<Self> {
        let upstream = select_upstream(config, &call_client_for(config, shared.call_client));
        let mut store_namespace = None;
        let store = match shared.redis {
            None => Store::new(MemoryStore::start()),
            Some(redis) => {
                let namespace = settings::store_namespace(config);
                log_namespace(name.as_deref(), &namespace, shared.namespace_given);
                store_namespace = Some(namespace.to_string());
                Store::new(redis.with_namespace(namespace))
            }
        };
        // Routed before the first transition, so no event is missed.
        let webhooks = crate::webhooks::Webhooks::start(
            settings::webhooks(config)?,
            &store,
            name.clone(),
            config.cluster.instance_id.clone(),
            telemetry::Meter::new(name.as_deref()),
            shared.closing.clone(),
        )
        .await
        .map_err(std::io::Error::other)?;
        let tasks = TaskService::start(
            &store,
            upstream.clone(),
            settings::tasks(config, &shared.running_counts),
        );
        let takeovers = Arc::new(Takeovers::new(tasks.clone()));
        let membership = Membership::start(
            store.membership.clone(),
            takeovers.clone(),
            settings::cluster(config),
        )
        .await;
        let auth = shared
            .auth
            .map(|auth| match &config.auth.auth_jwt_audience {
                Some(audience) if name.is_some() => Arc::new(auth.for_audience(audience.clone())),
                _ => auth.clone(),
            });
        let gateway = Arc::new(server::Gateway::new(
            settings::gateway(config)?,
            shared.client.clone(),
            upstream.clone(),
            tasks.clone(),
            shared.closing.clone(),
            shared.edge.clone(),
            auth,
        ));
        Ok(Self {
            gateway,
            store,
            webhooks,
            store_namespace,
            tasks,
            takeovers,
            membership,
            upstream,
        })
    }

    fn name(&self) -> Option<&str> {
        self.gateway.name.as_deref()
    }

    fn admin(&self, config: &Config) -> admin::Admin {
        admin::Admin::new(
            self.store.inspection.clone(),
            self.tasks.clone(),
            config.cluster.instance_id.clone(),
            self.store_namespace.clone(),
        )
        .with_webhooks(admin::AdminWebhooks {
            outbox: self.store.outbox.clone(),
            subscriptions: self.webhooks.subscriptions.clone(),
        })
    }

    fn console_view(&self, config: &Config) -> admin::console::WorldView {
        admin::console::WorldView {
            name: self.name().unwrap_or_default().to_owned(),
            inspection: self.store.inspection.clone(),
            tasks: self.tasks.clone(),
            admin: self.admin(config),
            ask_upstream: !config.operations.readyz_skip_upstream,
        }
    }

    /// The stop after the listener closed: tasks still running here end now, visibly to
    /// every instance, or wait for a live instance to take them over.
    async fn stop(self, drain_timeout: Duration, instance_id: &str) {
        let peers_alive = peers_alive(&self.store, instance_id).await;
        let handed_over = self.takeovers.drain(drain_timeout, peers_alive).await;
        self.membership.shutdown(handed_over).await;
        self.upstream.shutdown().await;
    }
}

fn log_namespace(upstream: Option<&str>, namespace: &StoreNamespace, given: bool) {
    let upstream = upstream.unwrap_or_default();
    match namespace {
        StoreNamespace::Unprefixed => tracing::warn!(
            "--store-namespace \"\": the legacy key layout (mtg:...), shared with every \
             other gateway that uses it: no isolation. Meant only for upgrading; see \
             docs/redis.md, \"Upgrading\""
        ),
        StoreNamespace::Named(name) => tracing::info!(
            upstream,
            namespace = %name,
            derived = !given,
            "task store keys under mtg:{name}:"
        ),
    }
}

/// Whether another instance holds a live lease: only then can tasks be handed over.
async fn peers_alive(store: &Store, me: &str) -> bool {
    match store.inspection.instances().await {
        Ok(instances) => instances
            .iter()
            .any(|i| i.instance != me && i.lease_expires_in_ms.is_some_and(|left| left > 0)),
        Err(e) => {
            tracing::warn!(error = %e, "could not list the live instances; failing the tasks left");
            false
        }
    }
}

/// The upstream the flags name: a URL, or a command to run over stdio.
fn select_upstream(
    config: &Config,
    client: &mtg_transport::CallClient,
) -> Arc<dyn upstream::Upstream> {
    let command = config
        .upstream
        .upstream_cmd
        .as_ref()
        .and_then(|words| upstream::stdio::StdioCommand::new(&words.0));
    match (command, &config.upstream.url) {
        (Some(mut command), _) => {
            command.env = config.upstream.upstream_env.clone();
            command.cwd = config.upstream.upstream_cwd.clone();
            upstream::stdio::StdioUpstream::start(
                command,
                usize::from(config.upstream.upstream_pool),
                &config.upstream.roots,
            )
        }
        (None, Some(url)) => {
            upstream::detect::AutoUpstream::new(client.clone(), url.clone(), &config.upstream.roots)
        }
        // `World::start` is called only for a world with an upstream.
        (None, None) => unreachable!("a world without an upstream"),
    }
}

/// How a world's own calls reach its upstream: HTTP/1.1 on the shared client, or, with
/// `--upstream-http2`, a pool of HTTP/2 connections of the world's own.
fn call_client_for(
    config: &Config,
    http1: &mtg_transport::Http1Client,
) -> mtg_transport::CallClient {
    match &config.upstream.url {
        Some(url) if config.upstream.upstream_http2 => mtg_transport::CallClient::http2(
            url,
            http1.clone(),
            mtg_transport::h2_pool::PoolSettings {
                max_streams: config.upstream.upstream_http2_max_streams as usize,
            },
        ),
        _ => mtg_transport::CallClient::Http1(http1.clone()),
    }
}

fn describe_upstream(config: &Config) -> String {
    match (&config.upstream.upstream_cmd, &config.upstream.url) {
        (Some(words), _) => format!("stdio: {}", words.0.join(" ")),
        (None, Some(url)) => url.to_string(),
        (None, None) => String::new(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
