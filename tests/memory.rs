//! Memory measurements, in a binary of their own so that no other test's load is counted or
//! slowed: bodies streamed both ways, and many connections held at once.

#[path = "memory/aws_chunked.rs"]
mod aws_chunked;
mod common;
#[path = "memory/many_connections.rs"]
mod many_connections;
#[path = "memory/streaming.rs"]
mod streaming;
