//! Real processes for the gateway's integration tests and load benchmarks, in one place:
//! a child that is stopped with its process group when dropped, free loopback ports,
//! start-and-wait for a `listening on URL` line or an open port, and `redis-server`
//! instances and clusters of a run's own, certificates of a test CA, and the fixture
//! servers built on demand. Every wait polls against a deadline.
#![deny(unsafe_code)]

pub mod bench;
pub mod build;
pub mod process;
pub mod redis;
pub mod tls;

pub use process::{
    DEADLINE, Proc, children_of, descendants_of, free_port, spawn_announcing, wait_for_port,
};
pub use redis::{RedisCluster, RedisSentinel, RedisServer, SentinelProcess};
