//! End-to-end scenarios through the engine's library API: the built-in protocols, a custom
//! protocol defined only in a fixture, commitments, deadlines and retention.

mod commitments;
mod contract_net;
mod custom_protocol;
mod docs;
mod lifecycle;
mod query;
mod request;
mod support;
