//! fencegate: a fencing-token gate in front of object storage. See ARCHITECTURE.md for the map.
//!
//! Data flows one way: a surface ([`api`]) translates HTTP into gate calls; the [`gate`] decides
//! (policy, scope, token, commit protocol); the [`fence`] store records tokens durably and a
//! [`backend`] holds the bytes. Every surface authenticates against one key table ([`auth`]).

pub mod admin_client;
pub mod api;
pub mod auth;
pub mod backend;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod fence;
pub mod gate;
pub mod health;
pub mod http;
pub mod lease;
pub mod logging;
pub mod metrics;
pub mod s3api;
pub mod server;
pub mod shutdown;
pub mod token;
pub mod version;
pub mod wall_clock;
