//! The knobs of both group-commit engines (the stock engine's and the ledger's): partitions,
//! queue capacity, batch size, linger and batches in flight, each with its default and the limit
//! it is clamped to when an engine is built.

use std::time::Duration;

use crate::batch::schedule::Pace;

/// Default number of partitions (workers). Each holds one connection while its batch runs.
pub const DEFAULT_PARTITIONS: usize = 4;
/// Most partitions a configuration may ask for.
pub const MAX_PARTITIONS: usize = 64;
/// Default queue capacity per partition: beyond it `reserve` answers `Overloaded` at once.
pub const DEFAULT_QUEUE_CAPACITY: usize = 4_096;
/// Most queued requests per partition a configuration may ask for.
pub const MAX_QUEUE_CAPACITY: usize = 1_000_000;
/// Default most orders granted by one transaction.
pub const DEFAULT_MAX_BATCH: usize = 512;
/// Most orders one batch may hold, whatever the configuration says (bounds the statement size:
/// at most this × `MAX_ITEMS_PER_ORDER` rows per insert).
pub const MAX_BATCH_LIMIT: usize = 10_000;
/// Longest optional linger (waiting for more requests before starting a batch).
pub const MAX_LINGER: Duration = Duration::from_millis(50);
/// Default batches one partition may run at once (each on its own connection). Batches in
/// flight never share a product or an order, so this only lets unrelated orders proceed
/// without waiting for each other's batch; a hot product still has one batch at a time.
pub const DEFAULT_IN_FLIGHT: usize = 2;
/// Most batches in flight per partition a configuration may ask for.
pub const MAX_IN_FLIGHT: usize = 64;
/// Knobs of the batched engine; every value is clamped to its limit when the engine is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchedConfig {
    pub partitions: usize,
    pub queue_capacity: usize,
    pub max_batch: usize,
    /// Zero by default: the next batch is whatever queued while the previous one ran.
    pub linger: Duration,
    /// Batch transactions one partition may run at once, on products and orders disjoint
    /// from one another.
    pub in_flight: usize,
}

impl Default for BatchedConfig {
    fn default() -> Self {
        BatchedConfig {
            partitions: DEFAULT_PARTITIONS,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            max_batch: DEFAULT_MAX_BATCH,
            linger: Duration::ZERO,
            in_flight: DEFAULT_IN_FLIGHT,
        }
    }
}

impl BatchedConfig {
    /// How the workers form batches.
    pub(crate) fn pace(&self) -> Pace {
        Pace {
            max_batch: self.max_batch,
            linger: self.linger,
            in_flight: self.in_flight,
        }
    }

    pub(crate) fn clamped(&self) -> BatchedConfig {
        BatchedConfig {
            partitions: self.partitions.clamp(1, MAX_PARTITIONS),
            queue_capacity: self.queue_capacity.clamp(1, MAX_QUEUE_CAPACITY),
            max_batch: self.max_batch.clamp(1, MAX_BATCH_LIMIT),
            linger: self.linger.min(MAX_LINGER),
            in_flight: self.in_flight.clamp(1, MAX_IN_FLIGHT),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_clamped_to_its_limits() {
        let c = BatchedConfig {
            partitions: 0,
            queue_capacity: usize::MAX,
            max_batch: 0,
            linger: Duration::from_secs(10),
            in_flight: 0,
        }
        .clamped();
        assert_eq!(
            c,
            BatchedConfig {
                partitions: 1,
                queue_capacity: MAX_QUEUE_CAPACITY,
                max_batch: 1,
                linger: MAX_LINGER,
                in_flight: 1,
            }
        );
    }
}
