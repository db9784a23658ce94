//! The rows' time, written off the timeline's thread.
//!
//! The [`Timeline`](super::Timeline) decides, in trace order, what each waiting row of
//! `cycles` and `tsc` takes once its next anchor is known: one value for a whole range
//! of rows, or an interpolation by instruction count between two anchors. A range of
//! more than [`WRITE_AT_ONCE`] rows is recorded as a [`Fill`] (a few words) instead of
//! written row by row, and the timeline keeps, per piece, the highest value the piece
//! will hold. A released piece comes with its [`Fills`]; whoever holds it next writes the
//! rows ([`Fills::apply`]): the pipeline does it on its thread pool. Short ranges (a few
//! rows between two CYC-dated rows, as with cycle-accurate timing) cost less to write at
//! once than to record, and are. Writing the rows was 9% of a decode of a cycle-accurate
//! RTIT trace and the running maximum 2.5%, both on the thread every row goes through.
//!
//! The columns never decrease: each piece's values are raised to the highest value of
//! every piece before it (`Fills::carry`, known without the rows: a range's highest value
//! is its last row's) and to the highest so far within the piece.

use crate::rows::{BranchColumns, OptU64};

/// Which column a fill writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Col {
    Cycles = 0,
    Tsc = 1,
}

/// What a range of rows takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    /// Every row the same value (None: null).
    Same(Option<u64>),
    /// Interpolated by instruction count between two anchors (cumulative instructions,
    /// value) that rise: `xb > xa`, `v >= u`.
    Between((u64, u64), (u64, u64)),
}

impl How {
    /// The value of a row that ends `x` cumulative instructions in.
    #[inline]
    pub(crate) fn at(&self, x: u64) -> Option<u64> {
        match *self {
            How::Same(v) => v,
            How::Between(a, b) => interpolate(Some(a), Some(b), x),
        }
    }
}

/// Rows `from..to` of one column of a piece; `x` is the cumulative instruction count
/// before row `from` (a row's own instructions count towards its place).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fill {
    pub col: Col,
    pub from: usize,
    pub to: usize,
    pub x: u64,
    pub how: How,
}

/// What is left to do to a released piece's `cycles` and `tsc`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fills {
    pub(crate) ops: Vec<Fill>,
    /// The highest value of each column ([`Col`] order) in the pieces before this one.
    pub(crate) carry: [u64; 2],
}

impl Fills {
    /// Write the rows' time: every fill, then each column raised to the highest value so
    /// far (time never goes backwards).
    pub fn apply(&self, rows: &mut BranchColumns) {
        for f in &self.ops {
            let mut x = f.x;
            write(rows, f.col, f.from, f.to, &mut x, f.how);
        }
        running_max(&mut rows.cycles, self.carry[Col::Cycles as usize]);
        running_max(&mut rows.tsc, self.carry[Col::Tsc as usize]);
    }

    /// Ranges of rows to write.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Raise the highest value of column `col` to `v`.
#[inline]
pub(crate) fn raise(max: &mut [u64; 2], col: Col, v: u64) {
    max[col as usize] = max[col as usize].max(v);
}

/// Ranges of at most this many rows are written by the timeline itself.
pub(crate) const WRITE_AT_ONCE: usize = 32;

/// Write rows `from..to` of column `col`; `x` is the cumulative instruction count before
/// row `from`, and after row `to - 1` on return (interpolations only: the others leave it).
#[inline]
pub(crate) fn write(
    rows: &mut BranchColumns,
    col: Col,
    from: usize,
    to: usize,
    x: &mut u64,
    how: How,
) {
    let n = rows.len();
    let column = match col {
        Col::Cycles => &mut rows.cycles,
        Col::Tsc => &mut rows.tsc,
    };
    if how == How::Same(None) && column.is_empty() {
        // Null already: an empty timing column is all null.
        return;
    }
    column.materialize(n);
    match how {
        How::Same(v) => {
            column.values[from..to].fill(v.unwrap_or(0));
            column.valid[from..to].fill(v.is_some());
        }
        How::Between(..) => {
            for (i, &n) in rows.insns[from..to].iter().enumerate() {
                *x += n as u64;
                column.set(from + i, how.at(*x));
            }
        }
    }
}

/// Each non-null value of `col` raised to the highest so far, starting from `max`.
fn running_max(col: &mut OptU64, mut max: u64) {
    for (v, &valid) in col.values.iter_mut().zip(&col.valid) {
        if valid {
            max = max.max(*v);
            *v = max;
        }
    }
}

/// The value at `x` instructions between anchors `a` and `b` (cumulative instructions,
/// value), rounded down and clamped to them; after the last anchor (`b` None) its value.
pub(crate) fn interpolate(a: Option<(u64, u64)>, b: Option<(u64, u64)>, x: u64) -> Option<u64> {
    match (a, b) {
        (Some((xa, u)), Some((xb, v))) if xb > xa && v >= u => {
            let (d, f, span) = (v - u, x.clamp(xa, xb) - xa, xb - xa);
            // 64-bit arithmetic unless the product overflows (it nearly never does).
            let step = match d.checked_mul(f) {
                Some(p) => p / span,
                None => (d as u128 * f as u128 / span as u128) as u64,
            };
            Some(u + step)
        }
        (Some((_, u)), _) => Some(u),
        (None, Some((_, v))) => Some(v),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::BranchRow;
    use tracemill_schemas::BranchKind;

    fn rows(insns: &[u32]) -> BranchColumns {
        let mut r = BranchColumns::default();
        for &n in insns {
            r.push(&BranchRow {
                ip: 0,
                target: None,
                kind: BranchKind::Cond,
                taken: true,
                compressed: false,
                insns: n,
                tsc: None,
                cycles: None,
                cr3: None,
                offset: 0,
            });
        }
        r
    }

    #[test]
    fn fills_write_their_ranges_then_the_running_maximum_from_the_carry() {
        let mut r = rows(&[1, 1, 2, 4, 1]);
        r.cycles.set_row(4, Some(7), r.len());
        let f = Fills {
            ops: vec![
                Fill {
                    col: Col::Cycles,
                    from: 0,
                    to: 4,
                    x: 10,
                    // From (10, 100) to (18, 180): 10 a row's instruction.
                    how: How::Between((10, 100), (18, 180)),
                },
                Fill {
                    col: Col::Tsc,
                    from: 1,
                    to: 3,
                    x: 0,
                    how: How::Same(Some(5)),
                },
            ],
            carry: [0, 50],
        };
        f.apply(&mut r);
        let cycles: Vec<_> = (0..5).map(|i| r.cycles.get(i)).collect();
        // Row 4 was set to 7 directly: raised to the highest before it.
        assert_eq!(
            cycles,
            [Some(110), Some(120), Some(140), Some(180), Some(180)]
        );
        let tsc: Vec<_> = (0..5).map(|i| r.tsc.get(i)).collect();
        // Filled with 5, raised to the 50 carried from the pieces before.
        assert_eq!(tsc, [None, Some(50), Some(50), None, None]);
    }

    #[test]
    fn interpolation_stays_between_anchors_even_when_the_product_overflows_64_bits() {
        let (a, b) = (Some((10, 100)), Some((20, 200)));
        assert_eq!(interpolate(a, b, 15), Some(150));
        assert_eq!(
            interpolate(a, b, 5),
            Some(100),
            "clamped to the earlier anchor"
        );
        assert_eq!(
            interpolate(a, b, 99),
            Some(200),
            "clamped to the later anchor"
        );
        assert_eq!(interpolate(a, None, 99), Some(100), "after the last anchor");
        // (v - u) * f overflows u64: the 128-bit path gives the exact midpoint.
        let (u, v) = (1u64 << 40, (1u64 << 40) + (1u64 << 62));
        let (xa, xb) = (0u64, 1u64 << 10);
        assert_eq!(
            interpolate(Some((xa, u)), Some((xb, v)), 1 << 9),
            Some(u + (1u64 << 61))
        );
        // An anchor that goes backwards does not pull rows back.
        assert_eq!(interpolate(Some((0, 50)), Some((10, 40)), 5), Some(50));
    }
}
