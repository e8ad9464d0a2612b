//! What a benchmark operation does: the scenarios (`hot`, `uniform`, `zipf`, `multi-item`,
//! `bundle` reserve stock; `transfers-hot`, `transfers-uniform` move money; `holds-hot` holds money and
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
    /// Orders of one bundle, picked uniformly among `--products / --items` bundles, each one of
    /// every one of `--items` distinct products of its own: `multi-item`'s work plus a
    /// bundle's (its own row refused, its recipe read, its components taken). In process only.
    Bundle,
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
            Scenario::Bundle => "bundle",
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

/// The bundles of the `bundle` scenario: `(first bundle id, bundles, components each)`. Bundle
/// `first + k` is one of each of products `k · per + 1 ..= (k + 1) · per`; the ids follow the
/// products'.
pub fn bundle_layout(products: u32, items: u32) -> (i64, u32, u32) {
    let per = items.clamp(1, products.max(1));
    (i64::from(products) + 1, (products / per).max(1), per)
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
    /// One of `count` bundles from `first`, each `per` components ([`bundle_layout`]).
    Bundles {
        first: i64,
        count: u32,
        per: u32,
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
            Scenario::Bundle => {
                let (first, count, per) = bundle_layout(products, items);
                Picker::Bundles { first, count, per }
            }
        }
    }

    /// The units an order of `items` takes from the stock: a bundle's are its components'.
    pub fn units(&self, items: &OrderItems) -> u64 {
        let named: u64 = items
            .iter()
            .map(|(_, q)| u64::from(q.get().unsigned_abs()))
            .sum();
        match self {
            Picker::Bundles { per, .. } => named * u64::from(*per),
            _ => named,
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
            Picker::Bundles { first, count, .. } => {
                vec![(first + i64::from(rng.random_range(0..*count)), 1)]
            }
        };
        Ok(OrderItems::new(items)?)
    }

    /// Two distinct accounts for a transfer, uniformly (`products` ≥ 2 for the ledger scenarios).
    pub fn pick_pair(&self, rng: &mut impl Rng) -> (i64, i64) {
        let n = match self {
            Picker::Uniform { products } | Picker::Multi { products, .. } => (*products).max(2),
            Picker::Bundles { count, .. } => (*count).max(2),
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
    fn a_bundle_order_names_one_bundle_and_counts_its_components_units() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        assert_eq!(bundle_layout(30, 3), (31, 10, 3));
        assert_eq!(
            bundle_layout(2, 5),
            (3, 1, 2),
            "never more components than products"
        );
        let picker = Picker::new(Scenario::Bundle, 30, 1.0, 3);
        for _ in 0..1_000 {
            let items = picker.pick(&mut rng).expect("items");
            let named: Vec<i64> = items.iter().map(|(p, _)| p.get()).collect();
            assert!(
                named.len() == 1 && (31..=40).contains(&named[0]),
                "{named:?}"
            );
            assert_eq!(picker.units(&items), 3, "one of each of three components");
        }
        let plain = Picker::new(Scenario::MultiItem, 30, 1.0, 3);
        let items = plain.pick(&mut rng).expect("items");
        assert_eq!(plain.units(&items), 3);
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
