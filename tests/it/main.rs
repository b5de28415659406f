//! The integration tests, as one binary: each starts the real `fencegate` binary (or, where a
//! test needs the gate itself, the library) against real parts (RocksDB on disk, moto and
//! ministack, etcd, the aws cli, boto3). tests/README.md says where a new test goes.

#[path = "../common/mod.rs"]
mod common;

mod authz_matrix;
mod azure_backend;
mod azure_faults;
mod azure_probe_store;
mod backend_contract;
mod cli;
mod clients;
mod cluster;
mod examples;
mod gcs_backend;
mod gcs_fake;
mod gcs_faults;
mod lease_reach;
mod native;
mod ops;
mod s3;
mod single_permission;
mod structure;
