//! Rows regrouped into runs of a fixed count, so that a Parquet file's bytes depend on its
//! rows alone, not on how they were batched.
//!
//! arrow-rs's column writer checks its page limits (rows per page, bytes per page, the
//! dictionary's size) every `write_batch_size` rows *of each array it is given*, counting
//! from that array's start. The decoder's batches follow its pieces, and pieces follow
//! the chunking, so the same rows decoded with `-j1` and `-j2` reached the writer in
//! different batches and came out as different pages (3 of 16 randomized cases). Given
//! runs of exactly `write_batch_size` rows, the writer cuts at the same rows every time.
//! Runs are slices of the batches (no copy) except where a run straddles two batches:
//! those few rows are copied together.

use std::collections::VecDeque;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::ArrowError;
use arrow_select::concat::{concat, concat_batches};

/// `arrays` (one column's consecutive pieces) cut again into arrays of exactly `step` rows
/// (the last may be shorter).
pub(crate) fn aligned_arrays(
    arrays: &[ArrayRef],
    step: usize,
) -> Result<Vec<ArrayRef>, ArrowError> {
    let step = step.max(1);
    if arrays.len() <= 1 {
        return Ok(arrays.to_vec());
    }
    let mut out = Vec::new();
    let mut part: Vec<ArrayRef> = Vec::new();
    let mut part_rows = 0;
    for a in arrays {
        let mut at = 0;
        while at < a.len() {
            let take = (step - part_rows).min(a.len() - at);
            part.push(a.slice(at, take));
            part_rows += take;
            at += take;
            if part_rows == step {
                out.push(join(&mut part)?);
                part_rows = 0;
            }
        }
    }
    if part_rows > 0 {
        out.push(join(&mut part)?);
    }
    Ok(out)
}

fn join(part: &mut Vec<ArrayRef>) -> Result<ArrayRef, ArrowError> {
    let r = if part.len() == 1 {
        part[0].clone()
    } else {
        let refs: Vec<&dyn arrow_array::Array> = part.iter().map(|a| a.as_ref()).collect();
        concat(&refs)?
    };
    part.clear();
    Ok(r)
}

/// Batches in, batches of exactly `step` rows out (and what is left at the end).
#[derive(Debug)]
pub(crate) struct Restager {
    step: usize,
    queue: VecDeque<RecordBatch>,
    rows: usize,
}

impl Restager {
    pub(crate) fn new(step: usize) -> Self {
        Restager {
            step: step.max(1),
            queue: VecDeque::new(),
            rows: 0,
        }
    }

    /// Take `batch`; returns the runs of `step` rows now complete.
    pub(crate) fn push(&mut self, batch: RecordBatch) -> Result<Vec<RecordBatch>, ArrowError> {
        self.rows += batch.num_rows();
        self.queue.push_back(batch);
        let mut out = Vec::new();
        while self.rows >= self.step {
            out.push(self.take(self.step)?);
        }
        Ok(out)
    }

    /// The rows left (fewer than `step`), if any.
    pub(crate) fn finish(&mut self) -> Result<Option<RecordBatch>, ArrowError> {
        if self.rows == 0 {
            return Ok(None);
        }
        self.take(self.rows).map(Some)
    }

    fn take(&mut self, n: usize) -> Result<RecordBatch, ArrowError> {
        let schema = self.queue.front().expect("rows are queued").schema();
        let mut parts = Vec::new();
        let mut left = n;
        while left > 0 {
            let b = self.queue.pop_front().expect("rows are queued");
            if b.num_rows() <= left {
                left -= b.num_rows();
                parts.push(b);
            } else {
                parts.push(b.slice(0, left));
                self.queue.push_front(b.slice(left, b.num_rows() - left));
                left = 0;
            }
        }
        self.rows -= n;
        if parts.len() == 1 {
            return Ok(parts.pop().expect("one part"));
        }
        concat_batches(&schema, &parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, UInt64Array};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    fn col(range: std::ops::Range<u64>) -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(range))
    }

    #[test]
    fn arrays_are_cut_at_every_step_whatever_their_pieces() {
        let a = aligned_arrays(&[col(0..3), col(3..10), col(10..11)], 4).unwrap();
        let lens: Vec<usize> = a.iter().map(|a| a.len()).collect();
        assert_eq!(lens, [4, 4, 3]);
        let flat: Vec<u64> = a
            .iter()
            .flat_map(|a| {
                let a = a.as_any().downcast_ref::<UInt64Array>().unwrap();
                a.values().to_vec()
            })
            .collect();
        assert_eq!(flat, (0..11).collect::<Vec<_>>());
    }

    #[test]
    fn batches_come_out_in_runs_of_step() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::UInt64, false)]));
        let batch =
            |r: std::ops::Range<u64>| RecordBatch::try_new(schema.clone(), vec![col(r)]).unwrap();
        let mut r = Restager::new(4);
        let mut out = Vec::new();
        for b in [batch(0..1), batch(1..7), batch(7..8), batch(8..17)] {
            out.extend(r.push(b).unwrap());
        }
        out.extend(r.finish().unwrap());
        let lens: Vec<usize> = out.iter().map(|b| b.num_rows()).collect();
        assert_eq!(lens, [4, 4, 4, 4, 1]);
        assert!(r.finish().unwrap().is_none());
    }
}
