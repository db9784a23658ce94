//! Which address space code is looked up in: CR3 from PIPs, or the sideband's space at
//! the last place read, each held back while a FUP waits for its TIP.

use tracemill_schemas::EventKind;

use super::Walker;
use crate::front::{Format, Front, Raw};
use crate::rows::EventRow;
use crate::sink::RowSink;
use crate::spaces::Spaces;

impl<'a, 'c, F: Format, S: RowSink> Walker<'a, 'c, F, S> {
    /// A new CR3 for image lookups. The successor hint was found in the old address space:
    /// dropped, so that the next block is looked up in the new one whatever the walk did
    /// before (fuzz finding hint-across-pip: a hint kept across a gap and a PIP walked a
    /// block of the old address space in the sequential decode only).
    pub(super) fn set_cr3(&mut self, cr3: Option<u64>) {
        if self.st.cr3 != cr3 {
            self.st.cr3 = cr3;
            self.hint = None;
        }
    }

    /// A FUP's look-ahead changed CR3 from `before`: keep walking in `before` until the
    /// FUP's item is consumed (`cr3_after_fup`).
    pub(super) fn hold_cr3(&mut self, before: Option<u64>) {
        if self.st.cr3 != before {
            self.cr3_after_fup = Some(self.st.cr3);
            self.st.cr3 = before;
        }
    }

    /// The lookup key of code: the sideband's space when the input has one, else the
    /// CR3 of the last PIP.
    #[inline(always)]
    pub(super) fn key(&self) -> Option<u64> {
        if self.spaces.is_some() {
            self.st.space
        } else {
            self.st.cr3
        }
    }

    /// Select the space of the last place just read, if any: a PSB read for `raw` (events
    /// from `ne` and deferred events from `nd` on), or `raw` itself when it is an enable
    /// or an overflow's resume (where execution may be in another process).
    pub(super) fn select_space(
        &mut self,
        spaces: &Spaces,
        raw: &Raw<<F::Front<'a> as Front>::Error>,
        ne: usize,
        nd: usize,
    ) {
        let psb = |v: &[EventRow], from: usize| {
            v[from.min(v.len())..]
                .iter()
                .rev()
                .find(|e| e.kind == EventKind::Psb)
                .map(|e| e.offset)
        };
        let item = match *raw {
            Raw::Pge { off, .. } | Raw::Ovf { off, .. } => Some(off),
            _ => None,
        };
        // The last place read wins: a chunk body starting at a PSB read here selects
        // there too.
        let at = item
            .max(psb(&self.facts.events, ne))
            .max(psb(&self.facts.deferred, nd));
        if let Some(o) = at {
            let space = spaces.at(o);
            if self.st.space != space {
                self.st.space = space;
                // The successor link was found in the old space.
                self.hint = None;
            }
        }
    }

    /// A FUP's look-ahead selected a space other than `before`: keep walking in `before`
    /// until the FUP's item is consumed (`space_after_fup`), as for a PIP.
    pub(super) fn hold_space(&mut self, before: Option<u64>) {
        if self.st.space != before {
            self.space_after_fup = Some(self.st.space);
            self.st.space = before;
        }
    }
}
