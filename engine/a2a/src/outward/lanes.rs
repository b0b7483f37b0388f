//! One A2A agent's messages, several at a time.
//!
//! A remote agent may take seconds or minutes per message (`message/send` waits for the
//! work), so its messages are not sent one after another: up to [`MAX_IN_FLIGHT`] are under
//! way at once, each conversation's still in order (a message waits until the one before it
//! in its conversation has been answered, so a `cancel` follows its `request`). How far the
//! agent's inbox is handled moves only over messages that are all done, so a restart sends
//! again at most the messages that were under way. Tasks still running after `message/send`
//! are followed apart ([`super::follow_task`]), without holding a lane or their
//! conversation's next message; those recorded in the store by an earlier run are followed
//! again when the worker takes up the agent ([`Lanes::resume`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use tracing::Instrument as _;

use colloquy_protocol::api::InboxItem;
use tokio::sync::watch;
use tokio::task::{self, JoinSet};
use tokio::time::Instant;

use super::{Link, Peer, Running, Updates, WAITING_SWEEP, bridge, follow_task, sweep_waiting};
use colloquy_core::store::RemoteTask;

/// Most messages of one agent under way at once.
pub const MAX_IN_FLIGHT: usize = 16;

/// The messages of one agent under way, and how far its inbox is handled.
pub struct Lanes {
    link: Link,
    /// Each message's call and answer; yields the message's `seq` and, when the agent's
    /// task still runs, what to follow.
    running: JoinSet<(u64, Option<Running>)>,
    /// The `seq` of each running task, for one that panicked.
    seq_of: HashMap<task::Id, u64>,
    /// Tasks still running at the agent, each followed until it ends; yields the task.
    followers: JoinSet<RemoteTask>,
    /// The conversation and message of each task followed, so none is followed twice.
    following: HashSet<(Arc<str>, Arc<str>)>,
    /// Messages started and not yet counted as handled, in inbox order.
    started: VecDeque<u64>,
    /// Of those, the ones that are done.
    done: HashSet<u64>,
    /// Per conversation, whether its last started message is done: the next one waits.
    last: HashMap<Arc<str>, watch::Receiver<bool>>,
    /// When tasks waiting for input were last swept ([`sweep_waiting`]).
    swept: Option<Instant>,
}

impl Lanes {
    /// No message under way yet; the agent's card is read before the first call.
    pub fn new(peer: Peer) -> Lanes {
        Lanes {
            link: Link::new(peer),
            running: JoinSet::new(),
            seq_of: HashMap::new(),
            followers: JoinSet::new(),
            following: HashSet::new(),
            started: VecDeque::new(),
            done: HashSet::new(),
            last: HashMap::new(),
            swept: None,
        }
    }

    /// Whether a message is under way (then [`Lanes::settle`] has something to wait for).
    pub fn busy(&self) -> bool {
        !self.running.is_empty()
    }

    /// Starts bridging `item`, first waiting for a free lane. Returns how far the inbox is
    /// handled when waiting for a lane moved it.
    pub async fn start(&mut self, item: InboxItem) -> Option<u64> {
        let mut handled = None;
        while self.running.len() >= MAX_IN_FLIGHT {
            handled = self.settle().await.or(handled);
        }
        if self
            .swept
            .is_none_or(|swept| swept.elapsed() >= WAITING_SWEEP)
        {
            self.sweep();
        }
        let (finished, done) = watch::channel(false);
        let before = self.last.insert(item.conversation_id.clone(), done);
        let link = self.link.clone();
        let seq = item.seq;
        self.started.push_back(seq);
        let span = super::bridge_span(&link.peer, &item);
        let started = self.running.spawn(async move {
            if let Some(mut before) = before {
                // An error means the earlier message's task is gone: nothing to wait for.
                let _ = before.wait_for(|done| *done).await;
            }
            let running = bridge(&link, &item).instrument(span).await;
            let _ = finished.send(true);
            (seq, running)
        });
        self.seq_of.insert(started.id(), seq);
        handled
    }

    /// Waits until a message under way is done (at once with `None` when none is). Returns
    /// how far the inbox is handled when that moved.
    pub async fn settle(&mut self) -> Option<u64> {
        let (id, seq) = match self.running.join_next_with_id().await? {
            Ok((id, (seq, running))) => {
                if let Some(Running { task, updates }) = running {
                    self.follow(task, updates);
                }
                (id, seq)
            }
            Err(error) => {
                let id = error.id();
                let seq = self.seq_of.get(&id).copied()?;
                tracing::error!(agent = %self.link.peer.agent, seq, %error, "A2A bridge task failed");
                (id, seq)
            }
        };
        self.seq_of.remove(&id);
        self.done.insert(seq);
        self.handled()
    }

    /// Follows the tasks the store says the agent still runs (recorded before a restart, or
    /// by the node that led the agent's delivery before), except those followed already and
    /// those that wait for input (the initiator's next message goes into them).
    pub async fn resume(&mut self) {
        self.reap();
        self.sweep();
        let peer = &self.link.peer;
        match peer.engine.store().remote_tasks(&peer.agent).await {
            Ok(tasks) => {
                for task in tasks.into_iter().filter(|task| !task.awaits_input) {
                    self.follow(task, None);
                }
            }
            Err(error) => {
                tracing::warn!(agent = %peer.agent, %error, "cannot read the A2A agent's running tasks; they are not followed");
            }
        }
    }

    /// Forgets, in the background, the tasks that wait for answers nobody will give.
    fn sweep(&mut self) {
        self.swept = Some(Instant::now());
        tokio::spawn(sweep_waiting(self.link.peer.clone()));
    }

    /// Follows `task` until it ends (over `updates` while they come), unless it is
    /// followed already.
    fn follow(&mut self, task: RemoteTask, updates: Option<Box<Updates>>) {
        let key = (task.conversation_id.clone(), task.message_id.clone());
        if self.following.insert(key) {
            self.followers
                .spawn(follow_task(self.link.clone(), task, updates));
        }
    }

    /// Counts the done messages at the head of the inbox as handled: the new position, if
    /// it moved. Also forgets what is over (followers that ended, conversations whose last
    /// message is done).
    fn handled(&mut self) -> Option<u64> {
        let mut through = None;
        while let Some(&seq) = self.started.front() {
            if !self.done.remove(&seq) {
                break;
            }
            self.started.pop_front();
            through = Some(seq);
        }
        self.reap();
        self.last.retain(|_, done| !*done.borrow());
        through
    }

    /// Forgets the followers that ended.
    fn reap(&mut self) {
        while let Some(ended) = self.followers.try_join_next() {
            if let Ok(task) = ended {
                self.following
                    .remove(&(task.conversation_id, task.message_id));
            }
        }
    }
}
