//! The S3 gateway driven by real S3 clients, and the s3 backend against real stores.

mod aws_chunked;
mod backend;
mod browser;
mod checksums;
mod clients;
mod conformance;
mod cors;
mod everyday;
mod fixture;
mod fs_completion;
mod gateway;
mod integrity;
mod probe_store;
mod staging;
mod store_etags;
mod tables;
mod tags;
