//! How an arrival of units fills waiting backorders: oldest first (arrival order), the last one
//! possibly in part; what a confirmed order waited for is sold at once, an active one's units
//! become reserved.

use crate::stock::model::{Fill, Status, Waiting};

/// Units a fill sent to active backorders (now reserved) and to confirmed ones (now sold).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filled {
    pub to_reserved: i32,
    pub to_sold: i32,
}

impl Filled {
    pub fn total(self) -> i32 {
        self.to_reserved + self.to_sold
    }
}

/// Distributes `units` over `waiting` (in arrival order): the fills, what they add up to, and
/// the units left over. Each fill's order position is given by [`number`] once the orders'
/// last positions are known.
pub(crate) fn fill(units: i32, waiting: &[Waiting]) -> (Vec<Fill>, Filled, i32) {
    let mut left = units;
    let mut fills = Vec::new();
    let mut filled = Filled::default();
    for w in waiting {
        if left <= 0 {
            break;
        }
        let f = w.backordered.min(left);
        if f <= 0 {
            continue;
        }
        left -= f;
        let sold = w.status == Status::Confirmed;
        if sold {
            filled.to_sold += f;
        } else {
            filled.to_reserved += f;
        }
        fills.push(Fill {
            id: w.id,
            order_id: w.order_id.clone(),
            product_id: w.product_id,
            arrival: w.arrival,
            units: f,
            sold,
            position: 0,
        });
    }
    (fills, filled, left)
}

/// Gives each fill its order's next event position after `last` (one event per order per
/// round, so fills of one order share it).
pub(crate) fn number(fills: &mut [Fill], last: &std::collections::HashMap<String, i64>) {
    for fill in fills.iter_mut() {
        fill.position = last.get(&fill.order_id).copied().unwrap_or(0) + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn waiting(backordered: i32, status: Status, arrival: i64) -> Waiting {
        Waiting {
            id: Uuid::new_v4(),
            order_id: format!("o{arrival}"),
            product_id: crate::domain::ProductId::new(1).expect("id"),
            status,
            backordered,
            arrival,
        }
    }

    #[test]
    fn the_oldest_fill_first_and_the_last_in_part() {
        let w = [
            waiting(2, Status::Confirmed, 1),
            waiting(3, Status::Active, 2),
            waiting(4, Status::Active, 3),
        ];
        let (fills, filled, left) = fill(4, &w);
        assert_eq!(fills.len(), 2);
        assert_eq!((fills[0].units, fills[0].sold), (2, true));
        assert_eq!((fills[1].units, fills[1].sold), (2, false));
        assert_eq!(
            filled,
            Filled {
                to_reserved: 2,
                to_sold: 2
            }
        );
        assert_eq!(left, 0);
        let (fills, filled, left) = fill(20, &w);
        assert_eq!(fills.len(), 3);
        assert_eq!(filled.total(), 9);
        assert_eq!(left, 11);
    }
}
