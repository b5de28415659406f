//! Several instances over one store, the fence table on a real etcd.

mod etcd_store;
mod protocol;
mod script;
