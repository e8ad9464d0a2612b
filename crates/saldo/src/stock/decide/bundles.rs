//! Bundles, pure: a bundle's declaration checked against its rows, a request that names
//! bundles rewritten onto their components, and a bundle's availability derived from theirs.
//!
//! A bundle holds no units: reserving, selling or returning `n` of it reserves, sells or
//! returns `n × quantity` of each component, summed with the request's other lines of the same
//! product before anything is checked (a bundle of two of one component needs two; a bundle
//! and its component in one order need both), so the components' sums are checked together,
//! by the same conditional writes as any multi-item order. One level only: a bundle is never a
//! component.

use std::collections::{BTreeMap, BTreeSet};

use crate::domain::LocationId;
use crate::domain::{InputError, Lines, OrderItems, ProductId, Quantity};
use crate::error::Error;
use crate::stock::model::{Placement, ReturnItemRequest, ReturnItems};

/// A bundle's components with the units one bundle takes of each, in product order.
pub type Recipe = Vec<(ProductId, i32)>;
/// Recipes by bundle.
pub type Recipes = BTreeMap<ProductId, Recipe>;

/// What a declaration needs to know of a product's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Declared a bundle already.
    pub bundle: bool,
    /// Its `available` (a component's, for the answer).
    pub available: i32,
    /// Holds units in any state, reserved or backordered, is stocked per location, or takes
    /// backorders: a bundle's row may do none of these.
    pub takes_units: bool,
}

/// Checks the declaration of `bundle` as `components`: never itself, every component an
/// existing product that is no bundle, and the bundle's own row holding nothing. `rows` holds
/// the bundle's row and the components' (absent: no such product); `component_of` is a bundle
/// that already has `bundle` as a component (none may: one level only).
pub fn check_declaration(
    bundle: ProductId,
    components: &OrderItems,
    rows: &BTreeMap<ProductId, Candidate>,
    component_of: Option<ProductId>,
) -> Result<(), Error> {
    if components.iter().any(|(c, _)| c == bundle) {
        return Err(InputError::BundleOfItself(bundle.get()).into());
    }
    if let Some(outer) = component_of {
        return Err(Error::ComponentOfBundle {
            product_id: bundle,
            bundle_id: outer,
        });
    }
    let own = rows.get(&bundle).ok_or(Error::UnknownProduct(bundle))?;
    if own.takes_units {
        return Err(Error::BundleHoldsStock(bundle));
    }
    for (component, _) in components.iter() {
        match rows.get(&component) {
            None => return Err(Error::UnknownProduct(component)),
            Some(row) if row.bundle => return Err(Error::ProductIsBundle(component)),
            Some(_) => {}
        }
    }
    Ok(())
}

/// `items` with every bundle replaced by its components (`n × quantity` each), summed with the
/// other lines of the same product. Past the per-order limits (items, quantity) it is the
/// same input error as an order that named them itself.
pub fn expand_items(items: &OrderItems, recipes: &Recipes) -> Result<OrderItems, Error> {
    let mut lines: Vec<(i64, i64)> = Vec::new();
    for (product, quantity) in items.iter() {
        match recipes.get(&product) {
            Some(recipe) => lines.extend(
                recipe
                    .iter()
                    .map(|(c, per)| (c.get(), i64::from(quantity.get()) * i64::from(*per))),
            ),
            None => lines.push((product.get(), i64::from(quantity.get()))),
        }
    }
    Ok(OrderItems::new(lines)?)
}

/// `placement` for `items` once every bundle in them stands for its components: a bundle
/// pinned to a location pins each of its components there. A component must come from one
/// place whichever line names it (a line of its own, or a bundle's), as a product named twice
/// in one request must: pinned to two locations, or pinned by one line and not by another, it
/// is refused as a location conflict.
pub fn expand_placement(
    items: &OrderItems,
    placement: &Placement,
    recipes: &Recipes,
) -> Result<Placement, Error> {
    let mut from: BTreeMap<ProductId, Option<&LocationId>> = BTreeMap::new();
    for (product, _) in items.iter() {
        let pin = placement.pinned.get(&product);
        let parts: Vec<ProductId> = match recipes.get(&product) {
            Some(recipe) => recipe.iter().map(|(c, _)| *c).collect(),
            None => vec![product],
        };
        for part in parts {
            match from.get(&part) {
                Some(seen) if *seen != pin => {
                    return Err(InputError::LocationConflict(part.get()).into())
                }
                Some(_) => {}
                None => {
                    from.insert(part, pin);
                }
            }
        }
    }
    let pinned = from
        .into_iter()
        .filter_map(|(product, pin)| pin.map(|l| (product, l.clone())))
        .collect();
    Ok(Placement {
        allocation: placement.allocation,
        pinned,
    })
}

/// The lines `lines` names, a bundle standing for every one of its components.
pub fn expand_lines(lines: &Lines, recipes: &Recipes) -> Result<Lines, Error> {
    let mut products: BTreeSet<i64> = BTreeSet::new();
    for product in lines.iter() {
        match recipes.get(&product) {
            Some(recipe) => products.extend(recipe.iter().map(|(c, _)| c.get())),
            None => {
                products.insert(product.get());
            }
        }
    }
    Ok(Lines::new(products)?)
}

/// A return's items with every bundle replaced by its components, each going where the
/// bundle's line says (location, state). A component that comes back twice is summed when
/// both go to the same place, and refused (named twice) when they do not: a return line is one
/// product to one place.
pub fn expand_returns(items: &ReturnItems, recipes: &Recipes) -> Result<ReturnItems, Error> {
    let mut out: BTreeMap<ProductId, ReturnItemRequest> = BTreeMap::new();
    for item in items.iter() {
        let parts: Vec<(ProductId, i64)> = match recipes.get(&item.product_id) {
            Some(recipe) => recipe
                .iter()
                .map(|(c, per)| (*c, i64::from(item.quantity.get()) * i64::from(*per)))
                .collect(),
            None => vec![(item.product_id, i64::from(item.quantity.get()))],
        };
        for (product, quantity) in parts {
            match out.get_mut(&product) {
                Some(seen) if seen.location_id == item.location_id && seen.state == item.state => {
                    let sum = i64::from(seen.quantity.get()) + quantity;
                    seen.quantity = Quantity::new(sum)?;
                }
                Some(_) => return Err(InputError::DuplicateLine(product.get()).into()),
                None => {
                    let line = ReturnItemRequest {
                        product_id: product,
                        quantity: Quantity::new(quantity)?,
                        location_id: item.location_id.clone(),
                        state: item.state,
                    };
                    out.insert(product, line);
                }
            }
        }
    }
    Ok(ReturnItems::new(out.into_values())?)
}

/// How many whole bundles the components' `available` units make: the least, over the
/// components, of what it has over what one bundle takes (a component without a row has
/// none).
pub fn derived_available(recipe: &[(ProductId, i32)], available: &BTreeMap<ProductId, i32>) -> i32 {
    recipe
        .iter()
        .map(|(c, per)| available.get(c).copied().unwrap_or(0).max(0) / (*per).max(1))
        .min()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::StockState;

    fn p(id: i64) -> ProductId {
        ProductId::new(id).expect("id")
    }

    fn recipes() -> Recipes {
        // Bundle 10: one of 1 and two of 2. Bundle 20: two of 1.
        BTreeMap::from([
            (p(10), vec![(p(1), 1), (p(2), 2)]),
            (p(20), vec![(p(1), 2)]),
        ])
    }

    fn items(lines: &[(i64, i64)]) -> OrderItems {
        OrderItems::new(lines.iter().copied()).expect("items")
    }

    #[test]
    fn a_bundle_becomes_its_components_summed_with_the_other_lines() {
        let expanded = expand_items(&items(&[(10, 3), (1, 1), (20, 1), (5, 4)]), &recipes())
            .expect("expanded");
        let got: Vec<(i64, i32)> = expanded.iter().map(|(p, q)| (p.get(), q.get())).collect();
        // 1: 3 (bundle 10) + 1 (its own line) + 2 (bundle 20); 2: 6; 5 as it was.
        assert_eq!(got, vec![(1, 6), (2, 6), (5, 4)]);
    }

    fn pinned(pins: &[(i64, &str)]) -> Placement {
        Placement {
            allocation: crate::domain::AllocationMode::Single,
            pinned: pins
                .iter()
                .map(|(product, l)| (p(*product), LocationId::new(*l).expect("location")))
                .collect(),
        }
    }

    #[test]
    fn a_pinned_bundle_pins_its_components_and_keeps_the_allocation() {
        let placement = pinned(&[(10, "north"), (5, "south")]);
        let expanded = expand_placement(&items(&[(10, 1), (5, 1), (7, 1)]), &placement, &recipes())
            .expect("expanded");
        assert_eq!(
            expanded,
            pinned(&[(1, "north"), (2, "north"), (5, "south")])
        );
    }

    #[test]
    fn a_component_from_two_places_is_a_location_conflict() {
        let conflict = |lines: &[(i64, i64)], pins: &[(i64, &str)]| {
            matches!(
                expand_placement(&items(lines), &pinned(pins), &recipes()),
                Err(Error::Input(InputError::LocationConflict(1)))
            )
        };
        // Two bundles sharing component 1, pinned apart.
        assert!(conflict(
            &[(10, 1), (20, 1)],
            &[(10, "north"), (20, "south")]
        ));
        // A pinned bundle and its component's own line unpinned, and the other way round.
        assert!(conflict(&[(10, 1), (1, 1)], &[(10, "north")]));
        assert!(conflict(&[(10, 1), (1, 1)], &[(1, "north")]));
        // Pinned to the same place by both: one place, no conflict.
        let same = expand_placement(
            &items(&[(10, 1), (1, 1)]),
            &pinned(&[(10, "north"), (1, "north")]),
            &recipes(),
        )
        .expect("one place");
        assert_eq!(same, pinned(&[(1, "north"), (2, "north")]));
    }

    #[test]
    fn a_request_without_bundles_is_unchanged() {
        let plain = items(&[(1, 2), (3, 1)]);
        assert_eq!(expand_items(&plain, &Recipes::new()).expect("same"), plain);
    }

    #[test]
    fn an_expansion_past_the_quantity_limit_is_the_same_input_error() {
        let big = BTreeMap::from([(p(10), vec![(p(1), i32::MAX)])]);
        let refused = expand_items(&items(&[(10, 2)]), &big);
        assert!(
            matches!(
                refused,
                Err(Error::Input(InputError::QuantityTooLarge { .. }))
            ),
            "{refused:?}"
        );
    }

    #[test]
    fn lines_naming_a_bundle_name_its_components_once() {
        let lines = Lines::new([10, 2, 20]).expect("lines");
        let got: Vec<i64> = expand_lines(&lines, &recipes())
            .expect("lines")
            .iter()
            .map(ProductId::get)
            .collect();
        assert_eq!(got, vec![1, 2]);
    }

    fn ret(product: i64, quantity: i64, state: StockState) -> ReturnItemRequest {
        ReturnItemRequest {
            product_id: p(product),
            quantity: Quantity::new(quantity).expect("q"),
            location_id: None,
            state,
        }
    }

    #[test]
    fn a_returned_bundle_returns_its_components_to_the_same_place() {
        let items = ReturnItems::new([
            ret(10, 1, StockState::Damaged),
            ret(20, 1, StockState::Damaged),
        ])
        .expect("items");
        let got: Vec<(i64, i32, StockState)> = expand_returns(&items, &recipes())
            .expect("expanded")
            .iter()
            .map(|i| (i.product_id.get(), i.quantity.get(), i.state))
            .collect();
        assert_eq!(
            got,
            vec![(1, 3, StockState::Damaged), (2, 2, StockState::Damaged)]
        );
        let split = ReturnItems::new([
            ret(10, 1, StockState::Damaged),
            ret(20, 1, StockState::Available),
        ])
        .expect("items");
        assert!(matches!(
            expand_returns(&split, &recipes()),
            Err(Error::Input(InputError::DuplicateLine(1)))
        ));
    }

    #[test]
    fn a_bundles_availability_is_its_scarcest_component_over_its_quantity() {
        let recipe = &recipes()[&p(10)];
        let available = BTreeMap::from([(p(1), 7), (p(2), 9)]);
        assert_eq!(derived_available(recipe, &available), 4);
        let short = BTreeMap::from([(p(1), 7), (p(2), 1)]);
        assert_eq!(derived_available(recipe, &short), 0);
        assert_eq!(derived_available(recipe, &BTreeMap::from([(p(1), 7)])), 0);
        assert_eq!(derived_available(&[], &available), 0);
    }

    fn row(bundle: bool, takes_units: bool) -> Candidate {
        Candidate {
            bundle,
            available: 0,
            takes_units,
        }
    }

    #[test]
    fn a_declaration_is_refused_for_each_broken_rule() {
        let components = items(&[(1, 1), (2, 2)]);
        let fine = BTreeMap::from([
            (p(10), row(false, false)),
            (p(1), row(false, true)),
            (p(2), row(false, false)),
        ]);
        assert!(check_declaration(p(10), &components, &fine, None).is_ok());
        let itself = items(&[(10, 1)]);
        assert!(matches!(
            check_declaration(p(10), &itself, &fine, None),
            Err(Error::Input(InputError::BundleOfItself(10)))
        ));
        let mut holding = fine.clone();
        holding.insert(p(10), row(false, true));
        assert!(matches!(
            check_declaration(p(10), &components, &holding, None),
            Err(Error::BundleHoldsStock(_))
        ));
        assert!(matches!(
            check_declaration(p(10), &components, &fine, Some(p(30))),
            Err(Error::ComponentOfBundle { .. })
        ));
        let mut nested = fine.clone();
        nested.insert(p(2), row(true, false));
        assert!(matches!(
            check_declaration(p(10), &components, &nested, None),
            Err(Error::ProductIsBundle(c)) if c == p(2)
        ));
        let mut missing = fine;
        missing.remove(&p(1));
        assert!(matches!(
            check_declaration(p(10), &components, &missing, None),
            Err(Error::UnknownProduct(c)) if c == p(1)
        ));
    }
}
