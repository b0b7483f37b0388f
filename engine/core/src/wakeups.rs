//! Wake-ups by key, for the streams that wait on one agent's inbox or one conversation's
//! events: a commit rings the keys it concerns, and only the streams listening on those wake.
//!
//! Before, every stream received every commit's notice on one broadcast channel and looked
//! whether it concerned it, so each message woke every open stream: with 2000 agents holding
//! an inbox stream open, starting a conversation cost the server 7.5 times the CPU it costs
//! with none.
//!
//! A listener that creates its [`OwnedNotified`] before it reads the store cannot miss a ring
//! that comes after the read: `notify_waiters` reaches every notified future created before
//! it, polled or not.

use std::sync::{Arc, Weak};

use dashmap::DashMap;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use crate::keyed::{Hasher, SHARDS};

type Listeners = DashMap<Arc<str>, Weak<Held>, Hasher>;

/// What the listeners of one key share. Only [`Listener`]s hold it strongly (a waiting
/// future holds the `Notify` alone), so its strong count is how many listen.
#[derive(Debug, Default)]
struct Held {
    notify: Arc<Notify>,
}

/// Keys (agent ids, conversation ids) with someone listening. A clone shares them.
#[derive(Clone, Debug)]
pub struct Wakeups {
    listeners: Arc<Listeners>,
}

impl Default for Wakeups {
    fn default() -> Wakeups {
        Wakeups {
            listeners: Arc::new(DashMap::with_hasher_and_shard_amount(
                Hasher::default(),
                SHARDS,
            )),
        }
    }
}

impl Wakeups {
    /// Listens on `key` until the listener is dropped.
    pub fn listen(&self, key: &str) -> Listener {
        let mut held = self.listeners.entry(Arc::from(key)).or_default();
        let shared = held.upgrade().unwrap_or_else(|| {
            let shared = Arc::new(Held::default());
            *held = Arc::downgrade(&shared);
            shared
        });
        drop(held);
        Listener {
            key: Arc::from(key),
            held: shared,
            listeners: self.listeners.clone(),
        }
    }

    /// Wakes whoever listens on `key`; nothing when nobody does.
    pub fn ring(&self, key: &str) {
        let held = self.listeners.get(key).and_then(|weak| weak.upgrade());
        if let Some(held) = held {
            held.notify.notify_waiters();
        }
    }

    /// How many listen on `key` now (open streams and waiting long polls).
    pub fn listening(&self, key: &str) -> usize {
        self.listeners
            .get(key)
            .map_or(0, |weak| weak.strong_count())
    }

    /// The keys someone listens on now.
    pub fn keys(&self) -> Vec<Arc<str>> {
        self.listeners
            .iter()
            .filter(|entry| entry.value().strong_count() > 0)
            .map(|entry| entry.key().clone())
            .collect()
    }

    /// Wakes every listener: after this node missed notices, so streams read again.
    pub fn ring_all(&self) {
        let listening: Vec<Arc<Held>> = self
            .listeners
            .iter()
            .filter_map(|entry| entry.value().upgrade())
            .collect();
        for held in listening {
            held.notify.notify_waiters();
        }
    }
}

/// One stream's hold on a key; the key is forgotten when its last listener goes.
#[derive(Debug)]
pub struct Listener {
    key: Arc<str>,
    held: Arc<Held>,
    listeners: Arc<Listeners>,
}

impl Listener {
    /// A future that completes at the next ring of this key after this call. Create it
    /// before reading what the ring would announce.
    pub fn next_ring(&self) -> OwnedNotified {
        self.held.notify.clone().notified_owned()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Still holding our own `notify`: one strong reference left means it is the last.
        self.listeners
            .remove_if(&self.key, |_, weak| weak.strong_count() <= 1);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_ring_wakes_the_listeners_of_its_key_only_and_keys_go_with_them() {
        let wakeups = Wakeups::default();
        let bob = wakeups.listen("bob");
        let bob_again = wakeups.listen("bob");
        let carol = wakeups.listen("carol");
        assert_eq!(wakeups.listeners.len(), 2);
        assert_eq!(wakeups.listening("bob"), 2);
        assert_eq!(wakeups.listening("nobody"), 0);
        let (for_bob, for_bob_again, for_carol) =
            (bob.next_ring(), bob_again.next_ring(), carol.next_ring());
        // Rung after the futures were made, before they are polled: not missed.
        wakeups.ring("bob");
        wakeups.ring("nobody");
        tokio::time::timeout(Duration::from_secs(5), for_bob)
            .await
            .expect("bob woke");
        tokio::time::timeout(Duration::from_secs(5), for_bob_again)
            .await
            .expect("bob's second stream woke");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), for_carol)
                .await
                .is_err(),
            "carol was not rung"
        );
        drop(bob);
        assert_eq!(wakeups.listeners.len(), 2, "bob still has a listener");
        assert_eq!(
            wakeups.listening("bob"),
            1,
            "a listener, not its futures, counts"
        );
        drop(bob_again);
        drop(carol);
        assert!(wakeups.listeners.is_empty());
    }
}
