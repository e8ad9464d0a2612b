//! The fault lab: what it takes to run the real service against a misbehaving network and a
//! crashing database, and to tell afterwards whether every answer it gave was the truth.
//!
//! - [`proxy`]: a TCP proxy of our own on 127.0.0.1 between the service and PostgreSQL that,
//!   on command, passes traffic, cuts every connection (RST or FIN) and refuses new ones,
//!   delays every chunk, or holds everything (a blackhole).

pub mod proxy;
