//! Logs on stderr, as text (the default) or as one JSON object per line (`--log-format json`,
//! `[server] log_format = "json"`), for log pipelines that parse fields instead of grepping.
//! In JSON, an event's own fields are top-level keys beside `timestamp`, `level`, `target` and
//! `message`, and the fields of the span it happened in go under `span` (for a request: the
//! fields README's "Logs" table lists, as far as they are known).
//!
//! Logging starts before the configuration file is read (its errors are printed, not
//! logged), so the subscriber is installed with text and switched once the format is known,
//! through a reload handle, before anything is served.

use std::sync::OnceLock;
use tracing_subscriber::layer::{Layered, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

pub use crate::config::LogFormat;

// `--log-format text|json`: the config's type, so the flag and the file take the same words.
impl clap::ValueEnum for LogFormat {
    fn value_variants<'a>() -> &'a [Self] {
        &[LogFormat::Text, LogFormat::Json]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(match self {
            LogFormat::Text => clap::builder::PossibleValue::new("text")
                .help("Human-readable lines (ANSI colours on a terminal)"),
            LogFormat::Json => {
                clap::builder::PossibleValue::new("json").help("One JSON object per line")
            }
        })
    }
}

type Filtered = Layered<EnvFilter, Registry>;
type Output = Box<dyn Layer<Filtered> + Send + Sync>;

static OUTPUT: OnceLock<reload::Handle<Output, Filtered>> = OnceLock::new();

/// Installs the global subscriber: `RUST_LOG` (default `info`), text on stderr.
pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info"))
        // s3s logs the expected signature of a failed request at debug (whoever reads that
        // log could then sign as any key), and every client error at ERROR. fencegate logs
        // each request once itself (the `served` line, and its own refusals and faults), so
        // s3s is silenced, whatever RUST_LOG says.
        .add_directive("s3s=off".parse().expect("a valid directive"));
    let (output, handle) = reload::Layer::new(output(LogFormat::Text));
    tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .init();
    let _ = OUTPUT.set(handle);
}

/// Switches the output to `format` (before serving: spans opened earlier keep their fields
/// in the earlier format).
pub fn use_format(format: LogFormat) {
    if format == LogFormat::Text {
        return;
    }
    let Some(handle) = OUTPUT.get() else { return };
    if let Err(e) = handle.reload(output(format)) {
        tracing::warn!(error = %e, "cannot switch the log format; logging as text");
    }
}

fn output(format: LogFormat) -> Output {
    match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
    }
}
