//! End-to-end scenarios through the engine's library API: the built-in protocols, a custom
//! protocol defined only in a fixture, commitments, deadlines and retention; `http_*`: the
//! same over a real HTTP service with SDK agents; `policy_manager`: hot reload, uploads and
//! remote engines following a policy manager; `traces`: OpenTelemetry spans exported to a
//! loopback collector, within one engine and across two.

mod a2a;
mod a2a_server;
mod audit;
mod binaries;
mod commitments;
mod contract_net;
mod custom_protocol;
mod docs;
mod hooks;
mod http_auth;
mod http_jwt;
mod http_ops;
mod http_protocols;
mod http_status;
mod http_streams;
mod lifecycle;
mod ownership;
mod policy_manager;
mod query;
mod request;
mod rollouts;
mod support;
mod traces;
