//! Concurrent maps keyed by conversation id: the engine's loaded conversations and the
//! memory store's logs.
//!
//! Such a map holds every conversation until retention removes it, hundreds of thousands on
//! a busy engine, and grows by rehashing one shard at a time while holding that shard's
//! lock. With dashmap's default shard count (four per CPU: four when the server runs on one
//! CPU) each rehash moves a quarter of the map at once, and every request that touches the
//! shard, or the one worker thread doing the move, waits milliseconds: the tail latency of
//! the whole server. Many small shards make each rehash short.

use std::sync::Arc;

use dashmap::DashMap;

/// Keyed hashing; ids come from clients, so it is seeded per process.
pub type Hasher = foldhash::fast::RandomState;

/// A map from conversation id to `V`.
pub type ConversationMap<V> = DashMap<Arc<str>, V, Hasher>;

/// Shards per map: enough that one shard's rehash moves a small slice of a large map.
pub const SHARDS: usize = 256;

/// An empty [`ConversationMap`] with [`SHARDS`] shards.
pub fn conversation_map<V>() -> ConversationMap<V> {
    DashMap::with_hasher_and_shard_amount(Hasher::default(), SHARDS)
}
