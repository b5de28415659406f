//! The command line: `--help`, `check-config`, and the admin commands.

mod admin;
mod commands;
mod healthcheck;
mod status;
