//! Allocation across locations, decided in memory: which locations an item's units come from.
//!
//! A pure function so that the rules (priority then id, single vs split, a pinned location,
//! exact totals, never more than a location holds) are tested without a database; the located
//! path (`stock::locations`) calls it on the rows it has locked.

use crate::domain::{AllocationMode, LocationId};

/// One location of a product as the located path locked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub location_id: LocationId,
    pub priority: i32,
    pub available: i32,
}

/// Why an item cannot be allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shortfall {
    /// The pinned location does not stock the product.
    UnknownLocation,
    /// Not enough where the item may come from; `available` is what could have been had (the
    /// pinned location's units, the best single location's, or all locations' together).
    Insufficient { available: i32 },
}

/// Takes `quantity` units: from `pinned` only when given, else by `mode` over `sources` in
/// allocation order (priority, then location id). The answer is in allocation order, each
/// quantity positive, the quantities summing to exactly `quantity`, none above its source.
pub fn allocate(
    quantity: i32,
    mode: AllocationMode,
    pinned: Option<&LocationId>,
    sources: &[Source],
) -> Result<Vec<(LocationId, i32)>, Shortfall> {
    if let Some(pinned) = pinned {
        let source = sources
            .iter()
            .find(|s| &s.location_id == pinned)
            .ok_or(Shortfall::UnknownLocation)?;
        return if source.available >= quantity {
            Ok(vec![(pinned.clone(), quantity)])
        } else {
            Err(Shortfall::Insufficient {
                available: source.available.max(0),
            })
        };
    }
    let mut ordered: Vec<&Source> = sources.iter().collect();
    ordered.sort_by(|a, b| (a.priority, &a.location_id).cmp(&(b.priority, &b.location_id)));
    match mode {
        AllocationMode::Single => match ordered.iter().find(|s| s.available >= quantity) {
            Some(s) => Ok(vec![(s.location_id.clone(), quantity)]),
            None => Err(Shortfall::Insufficient {
                available: ordered
                    .iter()
                    .map(|s| s.available.max(0))
                    .max()
                    .unwrap_or(0),
            }),
        },
        AllocationMode::Split => {
            // i64: a product's locations together may hold more than i32 (each ≤ the count limit).
            let total: i64 = ordered.iter().map(|s| i64::from(s.available.max(0))).sum();
            if total < i64::from(quantity) {
                return Err(Shortfall::Insufficient {
                    available: i32::try_from(total).unwrap_or(i32::MAX),
                });
            }
            let mut left = quantity;
            let mut out = Vec::new();
            for s in ordered {
                if left == 0 {
                    break;
                }
                let take = left.min(s.available);
                if take > 0 {
                    out.push((s.location_id.clone(), take));
                    left -= take;
                }
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn loc(id: &str) -> LocationId {
        LocationId::new(id).expect("location id")
    }

    fn src(id: &str, priority: i32, available: i32) -> Source {
        Source {
            location_id: loc(id),
            priority,
            available,
        }
    }

    #[test]
    fn split_fills_in_priority_then_id_order() {
        let sources = [src("c", 0, 2), src("b", 1, 5), src("a", 0, 1)];
        assert_eq!(
            allocate(6, AllocationMode::Split, None, &sources),
            Ok(vec![(loc("a"), 1), (loc("c"), 2), (loc("b"), 3)])
        );
        assert_eq!(
            allocate(9, AllocationMode::Split, None, &sources),
            Err(Shortfall::Insufficient { available: 8 })
        );
    }

    #[test]
    fn single_takes_the_first_location_with_enough() {
        let sources = [src("a", 0, 2), src("b", 1, 5), src("c", 2, 9)];
        assert_eq!(
            allocate(3, AllocationMode::Single, None, &sources),
            Ok(vec![(loc("b"), 3)])
        );
        assert_eq!(
            allocate(2, AllocationMode::Single, None, &sources),
            Ok(vec![(loc("a"), 2)])
        );
        // 16 in total, but no single location holds 10.
        assert_eq!(
            allocate(10, AllocationMode::Single, None, &sources),
            Err(Shortfall::Insufficient { available: 9 })
        );
    }

    #[test]
    fn a_pinned_location_is_the_only_source() {
        let sources = [src("a", 0, 5), src("b", 1, 1)];
        for mode in [AllocationMode::Single, AllocationMode::Split] {
            assert_eq!(
                allocate(1, mode, Some(&loc("b")), &sources),
                Ok(vec![(loc("b"), 1)])
            );
            assert_eq!(
                allocate(2, mode, Some(&loc("b")), &sources),
                Err(Shortfall::Insufficient { available: 1 })
            );
            assert_eq!(
                allocate(1, mode, Some(&loc("z")), &sources),
                Err(Shortfall::UnknownLocation)
            );
        }
    }

    #[test]
    fn no_locations_means_nothing_available() {
        for mode in [AllocationMode::Single, AllocationMode::Split] {
            assert_eq!(
                allocate(1, mode, None, &[]),
                Err(Shortfall::Insufficient { available: 0 })
            );
        }
    }

    fn sources() -> impl Strategy<Value = Vec<Source>> {
        prop::collection::btree_map("[a-e]{1,2}", (-3i32..3, 0i32..20), 0..6).prop_map(|m| {
            m.into_iter()
                .map(|(id, (priority, available))| src(&id, priority, available))
                .collect()
        })
    }

    proptest! {
        #[test]
        fn allocations_are_exact_bounded_and_in_order(
            sources in sources(),
            quantity in 1i32..60,
            single in any::<bool>(),
        ) {
            let mode = if single { AllocationMode::Single } else { AllocationMode::Split };
            let total: i32 = sources.iter().map(|s| s.available).sum();
            let best = sources.iter().map(|s| s.available).max().unwrap_or(0);
            match allocate(quantity, mode, None, &sources) {
                Ok(parts) => {
                    prop_assert_eq!(parts.iter().map(|p| p.1).sum::<i32>(), quantity);
                    let rank = |id: &LocationId| {
                        let s = sources.iter().find(|s| &s.location_id == id);
                        prop_assert!(s.is_some(), "allocated from an unknown location");
                        let s = s.expect("checked");
                        Ok((s.priority, s.location_id.clone(), s.available))
                    };
                    let mut last = None;
                    for (id, q) in &parts {
                        let (priority, id, available) = rank(id)?;
                        prop_assert!(*q > 0 && *q <= available);
                        let key = (priority, id);
                        prop_assert!(last.as_ref() < Some(&key), "out of allocation order");
                        last = Some(key);
                    }
                    if single {
                        prop_assert_eq!(parts.len(), 1);
                        // The first location (in order) with enough, not any later one.
                        let mut ordered = sources.clone();
                        ordered.sort_by(|a, b| (a.priority, &a.location_id).cmp(&(b.priority, &b.location_id)));
                        let first = ordered.iter().find(|s| s.available >= quantity).map(|s| s.location_id.clone());
                        prop_assert_eq!(first, Some(parts[0].0.clone()));
                    } else {
                        // Split takes each earlier location whole before touching a later one.
                        for (i, (id, q)) in parts.iter().enumerate() {
                            if i + 1 < parts.len() {
                                prop_assert_eq!(Some(*q), sources.iter().find(|s| &s.location_id == id).map(|s| s.available));
                            }
                        }
                    }
                }
                Err(Shortfall::Insufficient { available }) => {
                    if single {
                        prop_assert!(best < quantity);
                        prop_assert_eq!(available, best);
                    } else {
                        prop_assert!(total < quantity);
                        prop_assert_eq!(available, total);
                    }
                }
                Err(Shortfall::UnknownLocation) => prop_assert!(false, "no location was pinned"),
            }
        }
    }
}
