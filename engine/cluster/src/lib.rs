//! Colloquy's ownership layer, store-agnostic and sans-IO: which engine node serves which
//! conversation when several share one store.
//!
//! A fixed number of **partitions** is keyed by the conversation id; each partition has at
//! most one owner at a time, by a **lease** in the store with an **epoch** that grows with
//! every acquire (a new tenure); the store **fences** every commit on `(partition, node,
//! epoch)`;
//! a node serves from its cache only while its lease is **locally valid** by its own
//! clock; any node **routes** a request to the owner. The protocol is written out in the
//! crate's README and in `docs/scale.md` ("Ownership").
//!
//! # Layout
//! - [`partition`]: [`PartitionId`] and the stable [`partition_of`].
//! - [`lease`]: [`NodeId`], [`Epoch`], [`Lease`], the [`LeaseStore`] trait a store
//!   implements, and the fencing contract its commits honour ([`Fence`], [`Fenced`]).
//! - [`config`]: [`OwnershipConfig`]: TTL, tick, drift bound, margins, and what follows
//!   from them.
//! - [`plan`](mod@plan): one tick's [`Action`]s from the lease table and the node's own view. Pure.
//! - [`local`]: [`LocalLeases`], a node's leases by its own monotonic clock, and
//!   [`Route`]s. Pure.
//! - [`driver`]: [`tick`] and [`leave`], the plan's actions sent to a [`LeaseStore`]
//!   and the answers taken in: the only code that awaits.
//! - [`memory`]: [`MemoryLeaseStore`], the in-memory store with an explicit clock, and the
//!   reference the model runs on.
//!
//! The model of the whole protocol — a simulated store, nodes with drifting clocks,
//! crashes, pauses, lost and reordered messages, checked by `proptest` — is
//! `tests/model.rs`.
//!
//! # Dependencies
//! None of the engine's: no store, no server, no runtime. A store implements
//! [`LeaseStore`] (one transaction per method) and the fencing check in its commit; the
//! server runs [`tick`] (`heartbeat` → [`LocalLeases::observe`] → [`plan()`] → send) every
//! tick and asks [`LocalLeases::route`] for each request.

pub mod config;
pub mod driver;
pub mod lease;
pub mod local;
pub mod memory;
pub mod partition;
pub mod plan;

pub use config::OwnershipConfig;
pub use driver::{TickOutcome, leave, tick};
pub use lease::{ClusterView, Epoch, Fence, Fenced, Lease, LeaseError, LeaseStore, Member, NodeId};
pub use local::{LocalLeases, Route, Ticket};
pub use memory::MemoryLeaseStore;
pub use partition::{PARTITIONS, PartitionId, partition_of};
pub use plan::{Action, plan};
