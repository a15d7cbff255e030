//! What the server logs and traces: warnings on standard error, and, when
//! built with the feature `otlp` and `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, its spans exported by
//! OTLP over HTTP: each delivery's `ttw_delivery` span, a child of the
//! trace its task was scheduled in (the `traceparent` it was scheduled
//! with). `OTEL_EXPORTER_OTLP_PROTOCOL` chooses `http/protobuf` (the
//! default) or `http/json`; `OTEL_SERVICE_NAME` names the service
//! (`ttw-server` unless set); the batch's other settings are the SDK's
//! own variables (`OTEL_BSP_SCHEDULE_DELAY`, ...).

#[cfg(feature = "otlp")]
use crate::error::Failure;
use crate::error::Result;

/// What must outlive the server for its traces to be sent: the exporter,
/// flushed when dropped.
pub(crate) struct Traces {
    #[cfg(feature = "otlp")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Drop for Traces {
    fn drop(&mut self) {
        #[cfg(feature = "otlp")]
        if let Some(provider) = self.provider.take() {
            // Sends what is left; an exporter that cannot is said once.
            if let Err(err) = provider.shutdown() {
                eprintln!("ttw server: traces not all exported: {err}");
            }
        }
    }
}

/// Sets up logging (warnings on standard error) and, if asked for, the
/// export of traces. A process that set a subscriber already keeps it.
pub(crate) fn init() -> Result<Traces> {
    #[cfg(feature = "otlp")]
    {
        let asked = [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
        if asked {
            return otlp();
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .try_init();
    Ok(Traces {
        #[cfg(feature = "otlp")]
        provider: None,
    })
}

#[cfg(feature = "otlp")]
fn otlp() -> Result<Traces> {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::{Protocol, WithExportConfig};
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    let protocol = match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref() {
        Ok("http/json") => Protocol::HttpJson,
        Ok("http/protobuf") | Err(_) => Protocol::HttpBinary,
        Ok(other) => {
            let speaks = "this build speaks http/protobuf and http/json";
            return Err(Failure(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL {other:?}: {speaks}"
            )));
        }
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
        .map_err(|e| Failure(format!("the OTLP exporter: {e}")))?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "ttw-server".to_string());
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service)
                .build(),
        )
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("ttw"));
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(LevelFilter::WARN),
        )
        .with(layer.with_filter(LevelFilter::INFO))
        .try_init();
    Ok(Traces {
        provider: Some(provider),
    })
}
