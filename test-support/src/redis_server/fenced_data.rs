//! The Redis harness's data behind the fence: string keys on the server (a resource is its
//! key), each write one `dlocks::fence::redis::set`.

use dlocks::fence::redis as fence;
use dlocks::LockError;
use redis::Commands;

use super::RedisServer;
use crate::server_cases::fenced_writes::{FencedData, FencedStore};

/// Values in string keys, each write a fenced `SET`.
struct FencedKeys(redis::Connection);

impl FencedStore for FencedKeys {
    fn write(&mut self, resource: &str, value: &str, token: u64) -> Result<(), LockError> {
        fence::set(&mut self.0, resource, value, token)
    }

    fn read(&mut self, resource: &str) -> Option<String> {
        self.0.get(resource).expect("GET")
    }
}

impl FencedData for RedisServer {
    fn fenced_store(&self) -> Box<dyn FencedStore> {
        Box::new(FencedKeys(self.admin()))
    }
}
