//! Memory measurements, in a binary of their own so that no other test's load is counted or
//! slowed: bodies streamed both ways, many connections held at once, and the hostile client
//! walked through every bound of docs/threat-model.md's hardening table.

#[path = "memory/aws_chunked.rs"]
mod aws_chunked;
mod common;
#[path = "memory/hostile.rs"]
mod hostile;
#[path = "memory/many_connections.rs"]
mod many_connections;
#[path = "memory/streaming.rs"]
mod streaming;
