//! What a benchmark operation does: the scenarios (`hot`, `uniform`, `zipf`, `multi-item`
//! reserve stock; `transfers-hot`, `transfers-uniform` move money; `holds-hot` holds money and
//! posts the hold), how each picks the items or
//! accounts of the next operation, and how much stock and money a run starts with (laid out by
//! `saldo::fixtures`). Stock and balances are large enough that a run never runs out: what is
//! measured is the engine, not the refusal path.

use anyhow::Result;
use rand::Rng;
use saldo::domain::{OrderItems, MAX_STOCK_COUNT};

/// The bench's scenarios (`saldo bench --scenario`; the variants' docs are its help).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// One product: every order contends for the same stock row.
    Hot,
    /// `hot` on a product stocked at three locations (priorities 0, 1, 2; split allocation):
    /// every order takes the located path (its stock row, then the three location rows,
    /// locked; allocation in memory), whatever the strategy.
    MultiLocation,
    /// `--products` products, picked uniformly.
    Uniform,
    /// `--products` products, picked with a Zipf law of exponent `--skew`.
    Zipf,
    /// Orders of `--items` distinct products, picked uniformly.
    MultiItem,
    /// Transfers of 1 between two accounts, in random directions (crossed transfers).
    TransfersHot,
    /// Transfers of 1 between two distinct accounts of `--products` accounts.
    TransfersUniform,
    /// Holds of 1 between two accounts in random directions, each posted once it is placed:
    /// hold + post count as one operation.
    HoldsHot,
}

impl Scenario {
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Hot => "hot",
            Scenario::MultiLocation => "multi-location",
            Scenario::Uniform => "uniform",
            Scenario::Zipf => "zipf",
            Scenario::MultiItem => "multi-item",
            Scenario::TransfersHot => "transfers-hot",
            Scenario::TransfersUniform => "transfers-uniform",
            Scenario::HoldsHot => "holds-hot",
        }
    }

    /// True for the ledger scenarios (their strategies are transfer strategies).
    pub fn is_transfers(self) -> bool {
        matches!(
            self,
            Scenario::TransfersHot | Scenario::TransfersUniform | Scenario::HoldsHot
        )
    }

    /// Products (or accounts) the scenario creates.
    pub fn products(self, requested: u32) -> u32 {
        match self {
            Scenario::Hot | Scenario::MultiLocation => 1,
            Scenario::TransfersHot | Scenario::HoldsHot => 2,
            Scenario::TransfersUniform => requested.max(2),
            _ => requested,
        }
    }
}

/// The locations of the `multi-location` scenario, in priority order.
pub const BENCH_LOCATIONS: [&str; 3] = ["north", "south", "east"];

/// The units each product gets before a run: the largest count, so it never runs out.
pub const STOCK_PER_PRODUCT: i32 = MAX_STOCK_COUNT;

/// Picks the items of the next order.
pub enum Picker {
    Hot,
    Uniform {
        products: u32,
    },
    /// Cumulative distribution over product ranks 1..=n.
    Zipf {
        cdf: Vec<f64>,
    },
    Multi {
        products: u32,
        items: u32,
    },
}

impl Picker {
    pub fn new(scenario: Scenario, products: u32, skew: f64, items: u32) -> Picker {
        match scenario {
            Scenario::Hot | Scenario::MultiLocation => Picker::Hot,
            Scenario::Uniform
            | Scenario::TransfersHot
            | Scenario::TransfersUniform
            | Scenario::HoldsHot => Picker::Uniform { products },
            Scenario::Zipf => {
                let weights: Vec<f64> = (1..=products)
                    .map(|k| 1.0 / f64::from(k).powf(skew))
                    .collect();
                let total: f64 = weights.iter().sum();
                let mut acc = 0.0;
                let cdf = weights
                    .iter()
                    .map(|w| {
                        acc += w / total;
                        acc
                    })
                    .collect();
                Picker::Zipf { cdf }
            }
            Scenario::MultiItem => Picker::Multi {
                products,
                items: items.min(products),
            },
        }
    }

    pub fn pick(&self, rng: &mut impl Rng) -> Result<OrderItems> {
        let items: Vec<(i64, i64)> = match self {
            Picker::Hot => vec![(1, 1)],
            Picker::Uniform { products } => vec![(i64::from(rng.random_range(1..=*products)), 1)],
            Picker::Zipf { cdf } => {
                let u: f64 = rng.random();
                let rank = cdf
                    .partition_point(|c| *c < u)
                    .min(cdf.len().saturating_sub(1));
                vec![(rank as i64 + 1, 1)]
            }
            Picker::Multi { products, items } => {
                let mut chosen: Vec<i64> = Vec::with_capacity(*items as usize);
                // Bounded: `items` ≤ `products`, and a collision only costs another draw.
                for _ in 0..(*items as usize) * 64 {
                    if chosen.len() == *items as usize {
                        break;
                    }
                    let p = i64::from(rng.random_range(1..=*products));
                    if !chosen.contains(&p) {
                        chosen.push(p);
                    }
                }
                chosen.into_iter().map(|p| (p, 1)).collect()
            }
        };
        Ok(OrderItems::new(items)?)
    }

    /// Two distinct accounts for a transfer, uniformly (`products` ≥ 2 for the ledger scenarios).
    pub fn pick_pair(&self, rng: &mut impl Rng) -> (i64, i64) {
        let n = match self {
            Picker::Uniform { products } | Picker::Multi { products, .. } => (*products).max(2),
            Picker::Zipf { cdf } => (cdf.len() as u32).max(2),
            Picker::Hot => 2,
        };
        let from = rng.random_range(1..=n);
        // A uniform pick among the n − 1 others.
        let mut to = rng.random_range(1..n);
        if to >= from {
            to += 1;
        }
        (i64::from(from), i64::from(to))
    }
}

/// The balance each account opens with: never exhausted by transfers of 1.
pub const OPENING_BALANCE: i64 = 1_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn pickers_stay_in_range() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for scenario in [
            Scenario::Hot,
            Scenario::MultiLocation,
            Scenario::Uniform,
            Scenario::Zipf,
            Scenario::MultiItem,
        ] {
            let picker = Picker::new(scenario, scenario.products(50), 1.2, 3);
            for _ in 0..100 {
                let (from, to) = picker.pick_pair(&mut rng);
                assert!(from != to && from >= 1 && to >= 1);
            }
            let products = scenario.products(50);
            let picker = Picker::new(scenario, products, 1.2, 3);
            for _ in 0..1_000 {
                let items = picker.pick(&mut rng).expect("items");
                assert!(items
                    .iter()
                    .all(|(p, _)| p.get() >= 1 && p.get() <= i64::from(products)));
                let expected = if scenario == Scenario::MultiItem {
                    3
                } else {
                    1
                };
                assert_eq!(items.len(), expected, "{scenario:?}");
            }
        }
    }

    #[test]
    fn zipf_prefers_the_first_ranks() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let picker = Picker::new(Scenario::Zipf, 1_000, 1.5, 1);
        let first = (0..10_000)
            .filter(|_| {
                let items = picker.pick(&mut rng).expect("items");
                let first = items.iter().next().map(|(p, _)| p.get());
                first == Some(1)
            })
            .count();
        // Rank 1 holds about 38% of the mass for s = 1.5; uniform would give 0.1%.
        assert!(first > 2_000, "rank 1 drawn {first} times");
    }
}
