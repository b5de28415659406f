//! The examples under examples/, run as a user would.

mod etcd;
mod zombie;
