//! Logs (`tracing`, pretty or JSON) and, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `..._TRACES_ENDPOINT`) is set, OpenTelemetry traces over OTLP/HTTP. W3C trace context
//! is continued from clients and propagated upstream.

use std::io::IsTerminal;

use opentelemetry::propagation::TextMapCompositePropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::Value;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// Flushes and stops the trace exporter when dropped.
pub struct TracingGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TracingGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("mcp-task-gateway: flushing traces failed: {e}");
        }
    }
}

/// Installs the global subscriber. The OTLP exporter runs a blocking client on the batch
/// processor's own thread, so this works before the Tokio runtime exists.
pub fn init(log_format: &str) -> TracingGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::stderr().is_terminal();
    let fmt: Box<dyn Layer<Registry> + Send + Sync> = if log_format == "json" {
        Box::new(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(std::io::stderr),
        )
    } else {
        Box::new(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(ansi),
        )
    };
    let (otel, provider) = match otlp_provider() {
        Ok(Some(provider)) => {
            let tracer = provider.tracer("mcp-task-gateway");
            (Some(tracer), Some(provider))
        }
        Ok(None) => (None, None),
        Err(e) => {
            eprintln!("mcp-task-gateway: OpenTelemetry export disabled: {e}");
            (None, None)
        }
    };
    // The OpenTelemetry layer sees every span; the filter applies to the log output.
    Registry::default()
        .with(fmt.with_filter(filter))
        .with(otel.map(|tracer| tracing_opentelemetry::layer().with_tracer(tracer)))
        .init();
    opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ]));
    TracingGuard { provider }
}

#[derive(Debug, thiserror::Error)]
enum OtlpError {
    #[error("OTLP protocol {0:?} is not supported; use http/protobuf or http/json")]
    UnsupportedProtocol(String),
    #[error(transparent)]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

fn otlp_provider() -> Result<Option<SdkTracerProvider>, OtlpError> {
    let configured = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
    if !configured || std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v == "true") {
        return Ok(None);
    }
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|_| "http/protobuf".into());
    let protocol = match protocol.as_str() {
        "http/protobuf" => Protocol::HttpBinary,
        "http/json" => Protocol::HttpJson,
        other => return Err(OtlpError::UnsupportedProtocol(other.to_owned())),
    };
    // Endpoint, headers and timeout come from the standard OTEL_* variables.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("mcp-task-gateway");
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build(),
    ))
}

/// Continues the client's trace: W3C `traceparent`/`tracestate` headers.
pub fn continue_from_headers(span: &tracing::Span, headers: &http::HeaderMap) {
    if !headers.contains_key("traceparent") {
        return;
    }
    let context =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)));
    let _ = span.set_parent(context);
}

/// Continues the client's trace from `params._meta.traceparent` (MCP carries trace
/// context there too), when the headers did not.
pub fn continue_from_meta(span: &tracing::Span, params: Option<&Value>) {
    let Some(meta) = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
    else {
        return;
    };
    let Some(traceparent) = meta.get("traceparent").and_then(Value::as_str) else {
        return;
    };
    let mut carrier = std::collections::HashMap::new();
    carrier.insert("traceparent".to_owned(), traceparent.to_owned());
    if let Some(state) = meta.get("tracestate").and_then(Value::as_str) {
        carrier.insert("tracestate".to_owned(), state.to_owned());
    }
    let context = opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier));
    let _ = span.set_parent(context);
}

/// Adds the current span's trace context to an upstream request.
pub fn inject_into(headers: &mut http::HeaderMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&context, &mut HeaderInjector(headers));
    });
}
