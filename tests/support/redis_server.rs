//! Starts and stops real `redis-server` processes for tests (filled in with the Redis backend).
