//! Work on one conversation: its lock taken, a step run where its template's steps belong
//! (here, or on the hook pool), the commit tried again on a version conflict, and the
//! receipt a retried request is answered with.

use std::sync::Arc;

use colloquy_policy::CompiledTemplate;
use colloquy_protocol::conversation::{
    ConversationStatus, Outcome, ThreadView, Violation, ViolationKind,
};
use colloquy_protocol::event::{ConversationEvent, EventKind, Refusal, ThreadTransition};
use colloquy_protocol::message::{AgentId, ENGINE_PARTY, Message, SendMessage};

use crate::conversation::Conversation;
use crate::dispatch;
use crate::error::EngineError;
use crate::hooks::{CallSite, HookCaller};
use crate::step::Step;
use crate::store::{Commit, StoreError};

use super::*;

impl Engine {
    /// Runs `work` on the loaded conversation after firing its due timers, and commits the
    /// result. Lost races with other writers are retried from a fresh load. So is a refusal
    /// decided on a cached copy that another node's commits have left behind: the version
    /// check catches a stale copy only when the work gets as far as a commit.
    ///
    /// The summary's threads are those `threads_of` picks, given the work's result.
    ///
    /// When the work refuses, `refused` says what the conversation records of it (see
    /// [`dispatch::refusal`]); the record is committed before the lock is let go, and the
    /// refusal is returned whether or not the record could be (a lost race runs the work
    /// again, as for any commit; another failure is logged).
    pub(super) async fn with_conversation<R: Send + 'static>(
        &self,
        id: &str,
        threads_of: impl Fn(&Conversation, &R) -> Vec<ThreadView>,
        refused: impl Fn(&Conversation, &EngineError) -> Option<Refusal>,
        work: Arc<Work<R>>,
    ) -> Result<(Summary, R), EngineError> {
        let mut attempt = 0;
        let mut on_pool = false;
        loop {
            attempt += 1;
            let slot = self.loaded_slot(id).await?;
            let mut guard = slot.lock().await;
            // Owned by the work while it runs; work that never comes back (its caller gone,
            // the hook pool busy) leaves the slot empty, and the next request reloads the
            // conversation from the store.
            let Some(conversation) = guard.take() else {
                // Dropped by a failed commit between load and lock: load again.
                continue;
            };
            let now = self.now();
            let retention_ms = self.config.retention_ms;
            let work = work.clone();
            let Worked {
                conversation,
                timers,
                version,
                result,
                emitted,
                commit,
                needs_pool,
            } = self
                .run_step(
                    &conversation.template.clone(),
                    on_pool,
                    move |hooks, site| {
                        work_on(conversation, now, (hooks, site), retention_ms, &*work)
                    },
                )
                .await?;
            if needs_pool && !on_pool {
                // A hook could not finish on this worker; the work runs again on the hook
                // pool, on this copy if the work changed nothing.
                on_pool = true;
                if timers.is_none() && !emitted {
                    *guard = Some(conversation);
                }
                continue;
            }
            *guard = Some(conversation);
            if let Some(timers) = timers
                && let Err(error) = self.commit(timers).await
            {
                *guard = None;
                if matches!(error, StoreError::Conflict { .. }) && attempt < MAX_COMMIT_ATTEMPTS {
                    continue;
                }
                return Err(error.into());
            }
            let value = match result {
                Ok(value) => value,
                Err(error) => {
                    if emitted {
                        // Contract broken (emitted, then failed): never trust this copy.
                        tracing::error!(conversation = %id, %error, "step failed after emitting events; reloading");
                        *guard = None;
                    } else if self.shared_store
                        && decided_by_state(&error)
                        && attempt < MAX_COMMIT_ATTEMPTS
                        && !self.store.events_after(id, version).await?.is_empty()
                    {
                        *guard = None;
                        continue;
                    }
                    if let Some(refusal) = guard
                        .as_ref()
                        .and_then(|conversation| refused(conversation, &error))
                        && let Err(failure) = self.record_refusal(&mut guard, refusal, now).await
                    {
                        // The live copy holds an event the store does not.
                        *guard = None;
                        // Another writer got there first: the refusal was decided on a
                        // copy it has left behind, so the work runs again on a fresh one.
                        if matches!(failure, StoreError::Conflict { .. })
                            && attempt < MAX_COMMIT_ATTEMPTS
                        {
                            continue;
                        }
                        tracing::warn!(conversation = %id, error = %failure, refusal = %error, "a refused message could not be recorded");
                    }
                    return Err(error);
                }
            };
            if emitted && let Err(error) = self.commit(commit).await {
                *guard = None;
                if matches!(error, StoreError::Conflict { .. }) && attempt < MAX_COMMIT_ATTEMPTS {
                    continue;
                }
                return Err(error.into());
            }
            let Some(conversation) = guard.as_ref() else {
                continue;
            };
            let summary = Summary {
                status: conversation.status,
                outcome: conversation.outcome,
                threads: threads_of(conversation, &value),
            };
            return Ok((summary, value));
        }
    }

    /// Commits `refusal` as a `message_refused` event of `conversation`, whose lock the
    /// caller holds. It changes nothing else: no thread moves, nothing is delivered, and the
    /// commit's wake-up is the conversation's own next one. It runs no hook, so it runs here.
    async fn record_refusal(
        &self,
        conversation: &mut Option<Conversation>,
        refusal: Refusal,
        now: u64,
    ) -> Result<(), StoreError> {
        let Some(conversation) = conversation.as_mut() else {
            return Ok(());
        };
        let mut step = Step::new(conversation, now);
        step.emit(EventKind::MessageRefused(Box::new(refusal)));
        self.commit(step.into_commit(self.config.retention_ms))
            .await
    }

    /// Runs `step`, synchronous work on a conversation it owns, where `template`'s steps
    /// belong, and tells it where that is. A template without a hook: here and now. One with
    /// a hook: here too, its calls held to [`colloquy_hooks::INLINE_SLICE`] on warm
    /// instances, while its module has not run past that too often; otherwise, or when
    /// `on_pool` (a step that could not finish here, run again), on the hook pool, so that
    /// its calls never hold an async worker for long (`crate::hook_pool`).
    pub(super) async fn run_step<T: Send + 'static>(
        &self,
        template: &CompiledTemplate,
        on_pool: bool,
        step: impl FnOnce(Option<&dyn HookCaller>, CallSite) -> T + Send + 'static,
    ) -> Result<T, EngineError> {
        // The engine step's span (when traces are exported): told the template, and taken
        // along to the hook pool's thread, so that hook calls there are its children.
        let span = if crate::trace_origins::exporting() {
            let span = tracing::Span::current();
            span.record("colloquy.template", &*template.name);
            span.record(
                "colloquy.template.revision",
                tracing::field::display(&template.revision),
            );
            span
        } else {
            tracing::Span::none()
        };
        match &self.hooks {
            Some(runtime)
                if template.hooks.is_some() && (on_pool || !runtime.runs_inline(template)) =>
            {
                let hooks = runtime.clone();
                runtime
                    .pool()
                    .run(&template.name, move || {
                        span.in_scope(|| step(Some(&*hooks), CallSite::Owned))
                    })
                    .await
                    .map_err(EngineError::HooksBusy)
            }
            Some(runtime) if template.hooks.is_some() => {
                Ok(step(Some(&**runtime), CallSite::Inline))
            }
            hooks => Ok(step(hooks.as_deref(), CallSite::Owned)),
        }
    }
}

/// Whether `error` was decided from the conversation's state, which another node may have
/// moved on, rather than from the request and the template alone.
pub(super) fn decided_by_state(error: &EngineError) -> bool {
    !matches!(
        error,
        EngineError::UnknownPerformative { .. } | EngineError::SchemaViolation { .. }
    )
}

/// A unit of work on a conversation, as [`Engine::with_conversation`] runs it: it may run
/// on a hook thread, so it owns what it reads.
pub(super) type Work<R> = dyn Fn(&mut Step<'_>) -> Result<R, EngineError> + Send + Sync;

/// What a unit of work left, handed back from wherever it ran.
pub(super) struct Worked<R> {
    pub(super) conversation: Conversation,
    /// The commit of the timers that fell due before the work, when any fired.
    pub(super) timers: Option<Commit>,
    /// The conversation's version the work started from.
    pub(super) version: u64,
    pub(super) result: Result<R, EngineError>,
    /// Whether the work emitted events (its commit is empty otherwise).
    pub(super) emitted: bool,
    pub(super) commit: Commit,
    /// A hook could not finish where the work ran: all of it is to be dropped and run again
    /// on the hook pool.
    pub(super) needs_pool: bool,
}

/// Fires `conversation`'s due timers, then runs `work` on it: the synchronous half of
/// [`Engine::with_conversation`].
pub(super) fn work_on<R>(
    mut conversation: Conversation,
    now: u64,
    (hooks, site): (Option<&dyn HookCaller>, CallSite),
    retention_ms: u64,
    work: &Work<R>,
) -> Worked<R> {
    let mut timers = Step::with_hooks(&mut conversation, now, hooks, site);
    dispatch::fire_due(&mut timers);
    let mut needs_pool = timers.needs_pool;
    let timers = (!timers.is_empty()).then(|| timers.into_commit(retention_ms));
    let version = conversation.version;
    let mut step = Step::with_hooks(&mut conversation, now, hooks, site);
    // After timers that need the pool, the work would run on a copy that is dropped anyway.
    let result = if needs_pool {
        Err(EngineError::HookNeedsPool)
    } else {
        work(&mut step)
    };
    needs_pool |= step.needs_pool || matches!(result, Err(EngineError::HookNeedsPool));
    let emitted = !step.is_empty();
    let commit = step.into_commit(retention_ms);
    Worked {
        conversation,
        timers,
        version,
        result,
        emitted,
        commit,
        needs_pool,
    }
}

/// A start's step: `on_start`, then the opening message if there is one. Returns the
/// messages it accepted.
pub(super) fn start_step(
    step: &mut Step<'_>,
    initiator: &str,
    opening: Option<(SendMessage, Arc<str>)>,
) -> Result<Vec<Message>, EngineError> {
    dispatch::on_start(step)?;
    if let Some((message, message_id)) = opening {
        dispatch::on_message(step, initiator, &message, message_id)
            .map_err(|error| error.under("/message"))?;
    }
    Ok(step
        .events()
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::MessageAccepted { message, .. } => Some((**message).clone()),
            _ => None,
        })
        .collect())
}

/// What [`Engine::send`]'s work found.
pub(super) enum Handled {
    /// Accepted now.
    Fresh(ReceiptParts),
    /// Accepted before, at this event seq.
    Duplicate(u64),
}

/// Where a conversation stands after a unit of work.
pub(super) struct Summary {
    pub(super) status: ConversationStatus,
    pub(super) outcome: Option<Outcome>,
    pub(super) threads: Vec<ThreadView>,
}

/// The message-specific half of a [`SendReceipt`].
#[derive(Default)]
pub(super) struct ReceiptParts {
    pub(super) receivers: Vec<AgentId>,
    pub(super) transitions: Vec<ThreadTransition>,
    pub(super) violation: Option<Violation>,
}

/// A message sent again under an accepted id must be a retry: the same sender, performative,
/// content, `in_reply_to` and `reply_by` as the message the id names (the first of
/// `events`). Receivers are not compared: routing may have changed them. Anything else is a
/// different message under a taken id, refused rather than answered with the first
/// message's receipt (which would tell its sender it was accepted, and lose it).
pub(super) fn check_retry(
    id: &Arc<str>,
    events: &[ConversationEvent],
    sender: &str,
    retry: &SendMessage,
) -> Result<(), EngineError> {
    let Some(first) = events.iter().find_map(|event| match &event.kind {
        EventKind::MessageAccepted { message, .. } if message.id == *id => Some(message),
        _ => None,
    }) else {
        return Ok(());
    };
    let differs = if *first.sender != *sender {
        Some("sender")
    } else if first.performative.name() != retry.performative {
        Some("performative")
    } else if first.content.value() != retry.content {
        Some("content")
    } else if first.in_reply_to.as_deref() != retry.in_reply_to.as_deref() {
        Some("in_reply_to")
    } else if first.reply_by != retry.reply_by {
        Some("reply_by")
    } else {
        None
    };
    match differs {
        None => Ok(()),
        Some(field) => Err(EngineError::MessageIdTaken {
            id: id.to_string(),
            field,
        }),
    }
}

/// Reads what happened to message `id` from the events from its `message_accepted` on.
pub(super) fn receipt_parts(id: &Arc<str>, events: &[ConversationEvent]) -> ReceiptParts {
    let mut parts = ReceiptParts::default();
    let mut iter = events.iter();
    for event in iter.by_ref() {
        if let EventKind::MessageAccepted {
            message,
            transitions,
        } = &event.kind
            && message.id == *id
        {
            parts.receivers = message.receivers.clone();
            parts.transitions = transitions.clone();
            break;
        }
    }
    for event in iter {
        match &event.kind {
            EventKind::ViolationRecorded(recorded)
                if recorded.message_id.as_deref() == Some(&**id)
                    && recorded.kind != ViolationKind::CommitmentViolated =>
            {
                parts.violation = Some((**recorded).clone());
                break;
            }
            EventKind::MessageAccepted { message, .. } if &*message.sender != ENGINE_PARTY => {
                break;
            }
            _ => {}
        }
    }
    parts
}
