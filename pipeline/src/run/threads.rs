//! A perf.data decode's thread columns: `cpu`, `pid`, `tid` and `time` appended to a row
//! table's batch, from the input layer's [`Threads`] (which thread ran where, when) and
//! the rows' [`Dates`].

use std::sync::Arc;

use arrow_array::builder::UInt32Builder;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{ArrowError, Schema};
use tracemill_input::perf::threads::{Dates, Threads};

/// `batch` (a row table's columns, with its `tsc` column) with `cpu`, `pid`, `tid`,
/// `time` appended, as [`tracemill_schemas::arrow::thread_fields`] defines them: the
/// thread of row `i` is the one `threads` has at `dates[i]` (see
/// [`tracemill_input::perf::threads::LastTimed`]), `time` is the row's own `tsc` in perf
/// time.
pub fn append(
    threads: &Threads,
    batch: &RecordBatch,
    dates: &Dates,
) -> Result<RecordBatch, ArrowError> {
    let n = batch.num_rows();
    if dates.rows() != n {
        return Err(ArrowError::InvalidArgumentError(format!(
            "{} dates for {n} rows",
            dates.rows()
        )));
    }
    let tsc = batch
        .column_by_name("tsc")
        .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
        .ok_or_else(|| ArrowError::SchemaError("a row table without tsc".into()))?;
    // One lookup per run of rows with the same date; each column is built a run at a
    // time, not a value and a validity bit per row through `Option`s (this runs on the
    // emitter's thread, which every decode thread waits for).
    let mut pid = UInt32Builder::with_capacity(n);
    let mut tid = UInt32Builder::with_capacity(n);
    for (rows, date) in dates.runs() {
        let who = threads.at(date);
        for (b, v) in [(&mut pid, who.0), (&mut tid, who.1)] {
            match v {
                Some(v) => b.append_value_n(v, rows.len()),
                None => b.append_nulls(rows.len()),
            }
        }
    }
    let clock = threads.clock();
    let time = tsc.unary::<_, arrow_array::types::UInt64Type>(|t| clock.tsc_to_perf_time(t));
    let cpu: ArrayRef = match threads.cpu {
        Some(c) => Arc::new(UInt32Array::from_value(c, n)),
        None => Arc::new(UInt32Array::new_null(n)),
    };
    let mut fields: Vec<_> = batch.schema_ref().fields().iter().cloned().collect();
    fields.extend(
        tracemill_schemas::arrow::thread_fields()
            .into_iter()
            .map(Arc::new),
    );
    let mut columns = batch.columns().to_vec();
    columns.extend([
        cpu,
        Arc::new(pid.finish()) as ArrayRef,
        Arc::new(tid.finish()),
        Arc::new(time),
    ]);
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::Field;
    use tracemill_input::perf::threads::Switch;
    use tracemill_perfdata::PerfClock;

    /// perf time = TSC / 2 + 1 s.
    fn clock() -> PerfClock {
        PerfClock {
            time_shift: 10,
            time_mult: 512,
            time_zero: 1_000_000_000,
            short: None,
        }
    }

    fn sw(cpu: u32, time: u64, tid: Option<u32>) -> Switch {
        Switch {
            cpu,
            time,
            pid: tid.map(|_| 7),
            tid,
        }
    }

    /// A batch of one `tsc` column.
    fn tsc_batch(tsc: Vec<Option<u64>>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "tsc",
            arrow_schema::DataType::UInt64,
            true,
        )]));
        RecordBatch::try_new(schema, vec![Arc::new(UInt64Array::from(tsc))]).unwrap()
    }

    /// Column `i` of `b`, a `UInt32` one.
    fn u32s(b: &RecordBatch, i: usize) -> Vec<Option<u32>> {
        let c = b.column(i).as_any().downcast_ref::<UInt32Array>().unwrap();
        c.iter().collect()
    }

    #[test]
    fn each_row_gets_the_thread_at_its_date_run_by_run() {
        let switches = [
            sw(3, 1_000_000_100, Some(71)),
            sw(3, 1_000_000_200, None),
            sw(3, 1_000_000_300, Some(72)),
        ];
        let t = Threads::for_cpu(3, &switches, clock());
        let dates: Vec<Option<u64>> = (0..40)
            .map(|i| (i % 7 != 3).then_some(150 + 15 * i))
            .collect();
        let e = append(&t, &tsc_batch(dates.clone()), &Dates::of(&dates)).unwrap();
        let col = |i: usize| u32s(&e, i);
        let want: Vec<_> = dates.iter().map(|&d| t.at(d)).collect();
        assert_eq!(col(2), want.iter().map(|w| w.0).collect::<Vec<_>>());
        assert_eq!(col(3), want.iter().map(|w| w.1).collect::<Vec<_>>());
        assert!(want.contains(&(Some(7), Some(71))) && want.contains(&(Some(7), Some(72))));
        assert!(want.contains(&(None, None)));
    }

    #[test]
    fn the_four_columns_are_appended_with_perf_time() {
        let t = Threads::for_cpu(3, &[sw(3, 1_000_000_500, Some(71))], clock());
        let b = tsc_batch(vec![Some(10), Some(1000), None, Some(4000)]);
        let dates = [Some(10), Some(1000), Some(1000), None];
        let e = append(&t, &b, &Dates::of(&dates)).unwrap();
        let names: Vec<_> = e
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["tsc", "cpu", "pid", "tid", "time"]);
        let u32s = |i: usize| u32s(&e, i);
        assert_eq!(u32s(1), [Some(3); 4]);
        // Threads by the dates given, times by the rows' own tsc.
        assert_eq!(u32s(3), [None, Some(71), Some(71), None]);
        let time = e.column(4).as_any().downcast_ref::<UInt64Array>().unwrap();
        assert_eq!(
            time.iter().collect::<Vec<_>>(),
            [
                Some(1_000_000_005),
                Some(1_000_000_500),
                None,
                Some(1_000_002_000)
            ]
        );
    }

    #[test]
    fn dates_for_another_number_of_rows_are_refused() {
        let t = Threads::for_thread(Some(7), 71, clock());
        let e = append(&t, &tsc_batch(vec![Some(1); 3]), &Dates::of(&[Some(1); 2]));
        assert!(e.unwrap_err().to_string().contains("2 dates for 3 rows"));
    }
}
