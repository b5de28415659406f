//! Several instances over one store, the fence table on a real etcd.

mod etcd_store;
mod limits;
mod no_conditions;
mod one_endpoint;
mod protocol;
mod script;
mod tombstones;

/// One cluster at a time: each is 3 etcd members, a store and the instances, on 2 cores.
pub(crate) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
