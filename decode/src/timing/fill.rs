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
        How::Between(a, b) => {
            let mut line = Line::new(a, b, *x);
            let values = &mut column.values[from..to];
            for (v, &n) in values.iter_mut().zip(&rows.insns[from..to]) {
                *x += n as u64;
                *v = line.at(*x);
            }
            column.valid[from..to].fill(true);
        }
    }
}

/// [`interpolate`] between two anchors at rising `x`, row after row, without a division
/// per row: the quotient and remainder of `d * f / span` are carried from row to row
/// (Bresenham's line), and a row's step adds `d / span` and `d % span` (divided once per
/// range) times its instructions. A division per row was most of the time the ordered
/// thread spent writing a perf.data's `tsc` column. Exactly `interpolate`'s values: a
/// test compares the two on random anchors and steps, products past 64 bits included.
struct Line {
    u: u64,
    d: u64,
    xa: u64,
    xb: u64,
    span: u64,
    /// `d / span`, `d % span`.
    qd: u64,
    rd: u64,
    /// `f` (the clamped `x - xa`) so far, and `d * f` as `q * span + r`, `r < span`.
    f: u64,
    q: u64,
    r: u64,
}

impl Line {
    /// Anchors `a`, `b` as [`How::Between`] has them (`xb > xa`, `v >= u`), from `x`.
    fn new((xa, u): (u64, u64), (xb, v): (u64, u64), x: u64) -> Line {
        let (d, span) = (v - u, xb - xa);
        let mut l = Line {
            u,
            d,
            xa,
            xb,
            span,
            qd: d / span,
            rd: d % span,
            f: 0,
            q: 0,
            r: 0,
        };
        l.restart(x.clamp(xa, xb) - xa);
        l
    }

    /// `q` and `r` for `f` computed afresh.
    fn restart(&mut self, f: u64) {
        let p = self.d as u128 * f as u128;
        let span = self.span as u128;
        self.f = f;
        self.q = (p / span) as u64;
        self.r = (p % span) as u64;
    }

    /// The value at `x` (not below the last `x` asked).
    #[inline]
    fn at(&mut self, x: u64) -> u64 {
        let f = x.clamp(self.xa, self.xb) - self.xa;
        let delta = f - self.f;
        if delta > 0 {
            // d * delta = qd * delta * span + rd * delta; qd * delta <= d cannot overflow.
            match self
                .rd
                .checked_mul(delta)
                .and_then(|t| t.checked_add(self.r))
            {
                Some(t) if t < self.span.saturating_mul(4) => {
                    self.f = f;
                    self.q += self.qd * delta;
                    self.r = t;
                    while self.r >= self.span {
                        self.r -= self.span;
                        self.q += 1;
                    }
                }
                _ => self.restart(f),
            }
        }
        self.u + self.q
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

    proptest::proptest! {
        /// A range's interpolation row by row ([`Line`], no division per row) gives
        /// [`interpolate`]'s value at every row: spans and slopes from one to past 64
        /// bits, rows before, on and after the anchors.
        #[test]
        fn the_line_row_by_row_is_the_interpolation_at_every_row(
            xa in 0u64..1 << 40,
            span_bits in 0u32..63,
            span_low in 1u64..1000,
            u in 0u64..1 << 62,
            d_bits in 0u32..63,
            d_low in 0u64..1000,
            before in 0u64..50,
            steps in proptest::collection::vec(
                proptest::prop_oneof![0u64..8, 0u64..10_000, 0u64..1 << 40],
                1..60,
            ),
        ) {
            let span = (1u64 << span_bits).saturating_add(span_low);
            let d = ((1u64 << d_bits) + d_low).min(u64::MAX - u);
            let (a, b) = ((xa, u), (xa.saturating_add(span), u + d));
            proptest::prop_assume!(b.0 > a.0);
            let mut x = xa.saturating_sub(before);
            let mut line = Line::new(a, b, x);
            for n in steps {
                x = x.saturating_add(n);
                proptest::prop_assert_eq!(Some(line.at(x)), interpolate(Some(a), Some(b), x));
            }
        }
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
