//! Operating fencegate: the admin surface, metrics, readiness, logs, reload, TLS, start-up
//! checks, configuration, the README and docs run as written, and the scripts a newcomer runs.

pub(crate) mod admin;
mod config_env;
mod docs_hygiene;
mod metrics;
mod readiness_and_logs;
mod readme;
mod reload;
mod scripts;
mod startup_checks;
mod store_claim;
mod tls;
