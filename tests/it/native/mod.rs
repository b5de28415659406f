//! The native HTTP API (`/v1/objects`, `/v1/fences`, `/v1/leases`) and what it promises.

mod api;
mod auth;
mod bypass;
mod concurrent_order;
mod crash_restart;
mod early_refusals;
mod hostile_keys;
mod leases;
mod random_requests;
mod reported_holes;
