//! Tests of the `saldo` binary, run for real against a fresh database on the test cluster
//! (`saldo_lab::testing`), with `--database-url`.

#[path = "suite/race.rs"]
mod race;

#[path = "suite/bench.rs"]
mod bench;

#[path = "suite/tokens.rs"]
mod tokens;

#[path = "suite/logs.rs"]
mod logs;

#[path = "suite/faults.rs"]
mod faults;

#[path = "suite/fault_events.rs"]
mod fault_events;

#[path = "suite/fault_webhooks.rs"]
mod fault_webhooks;

#[path = "suite/flood.rs"]
mod flood;

#[path = "suite/operator.rs"]
mod operator;

#[path = "suite/events.rs"]
mod events;

#[path = "suite/citus.rs"]
mod citus;

#[path = "suite/restart.rs"]
mod restart;

#[path = "suite/partitions.rs"]
mod partitions;
#[path = "suite/schema.rs"]
mod schema;
