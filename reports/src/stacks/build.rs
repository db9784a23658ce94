//! Walking a decode's branches table into [`Stacks`]: readers ahead, the walk behind.

use std::fs::File;

use anyhow::Result;

use crate::input::{Input, Table};
use crate::parquet_keys::{self};

use super::{events::*, functions::*, rows::*, trie::*, walker::*, MAX_DEPTH};

/// Walk the branches table and build the stacks. `on_span` sees every frame that ends
/// (with `tsc` times when `times`: timelines; without, `tsc` is not read), and frames
/// still open at the end end at the last row. `cycles` reads the `cycles` column (the
/// weight of a flame graph by cycles); without it the stacks' cycles stay 0.
///
/// Reader threads decode the Parquet row groups ahead of the walk (reading took about as
/// long as walking), and another reads the events; the walk takes both in order.
///
/// With `input.thread` (a perf.data decode), only that thread's rows, in time order
/// ([`super::threads`]).
pub fn build<'s>(
    input: &Input,
    f: &mut Functions<'s>,
    warnings: &mut Vec<String>,
    times: bool,
    cycles: bool,
    on_span: impl FnMut(Span),
) -> Result<Stacks> {
    let t = input.table("branches")?;
    let mut w = Walker {
        f,
        st: Stacks::new(cycles),
        stack: Vec::with_capacity(256),
        far_frames: 0,
        rets: ReturnFilter::new(),
        on_span,
        tsc: None,
        pending: Pending::default(),
        ip_at: Vec::new(),
        ip_ret: Vec::new(),
        target_at: Vec::new(),
    };
    let has_cycles = cycles && t.schema.field_with_name("cycles").is_ok();
    let has_tsc = times && t.schema.field_with_name("tsc").is_ok();
    let mut cols = vec!["ip", "target", "kind", "insns"];
    if has_cycles {
        cols.push("cycles");
    }
    if has_tsc {
        cols.push("tsc");
    }
    t.require(&cols)?;
    match &input.thread {
        Some(thread) => {
            let has_time = t.schema.field_with_name("time").is_ok();
            if has_time {
                cols.push("time");
            }
            let read = Read {
                cols: &cols,
                cycles: has_cycles,
                tsc: has_tsc,
                time: has_time,
            };
            super::threads::walk(input, t, thread, read, &mut w, warnings)?;
        }
        None => walk_table(input, t, &cols, has_cycles, has_tsc, &mut w, warnings)?,
    }
    w.pop_to(0);
    w.flush();
    if w.st.full > 0 {
        warnings.push(format!(
            "{} calls past 4 G distinct stacks: counted in their caller",
            w.st.full
        ));
    }
    if w.st.max_depth_hit > 0 {
        warnings.push(format!(
            "{} calls past the depth limit {MAX_DEPTH}: counted in the deepest frame",
            w.st.max_depth_hit
        ));
    }
    Ok(w.st)
}

/// The columns a walk reads, and which of the optional ones.
#[derive(Clone, Copy)]
pub(super) struct Read<'c> {
    pub(super) cols: &'c [&'c str],
    pub(super) cycles: bool,
    pub(super) tsc: bool,
    pub(super) time: bool,
}

/// Walk every row of the table, in table order.
fn walk_table<F: FnMut(Span)>(
    input: &Input,
    t: &Table,
    cols: &[&str],
    has_cycles: bool,
    has_tsc: bool,
    w: &mut Walker<'_, '_, F>,
    warnings: &mut Vec<String>,
) -> Result<()> {
    // Parquet row groups are read side by side, each by the reader `group % readers`,
    // and walked in order; Arrow IPC is one run of batches.
    let footer = t.parquet_footer()?;
    let groups = footer.as_ref().map_or(1, |m| m.metadata().num_row_groups());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // At least two with two row groups or more, so that the same code runs everywhere.
    let readers = groups.clamp(1, cores.clamp(2, 8));
    // Without cycles and times, row groups are read as dictionary keys (where they can
    // be: others go through arrow-rs).
    let by_keys = footer.as_ref().filter(|_| !has_cycles && !has_tsc);
    let reader = EventReader::open(input, None);
    std::thread::scope(|scope| -> Result<()> {
        let (erx, events_read) = reader.spawn(scope);
        let (mut rxs, mut backs) = (Vec::new(), Vec::new());
        for r in 0..readers {
            // A message is a batch, or the end of a row group (`None`); two ahead each.
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Option<Batch>>>(2);
            rxs.push(rx);
            let (footer, cols, t) = (footer.as_ref(), &cols, &t);
            let (back_tx, back_rx) = std::sync::mpsc::sync_channel::<Box<KeyedRows>>(2);
            backs.push(back_tx);
            scope.spawn(move || {
                let file = by_keys.and_then(|_| File::open(&t.path).ok());
                let mut pages = parquet_keys::Scratch::default();
                for g in (r..groups).step_by(readers) {
                    let keyed = by_keys.zip(file.as_ref()).and_then(|(m, file)| {
                        // The buffers of rows the walk is done with, or new ones.
                        let mut rows = back_rx.try_recv().unwrap_or_default();
                        let group = m.metadata().row_group(g);
                        rows.read(file, group, &mut pages).ok().map(|_| rows)
                    });
                    if let Some(rows) = keyed {
                        // A closed channel: the walk stopped.
                        if tx.send(Ok(Some(Batch::Keyed(rows)))).is_err()
                            || tx.send(Ok(None)).is_err()
                        {
                            return;
                        }
                        continue;
                    }
                    let batches = match footer {
                        Some(m) => t.row_group_batches(m, cols, g),
                        None => t.batches(cols),
                    };
                    let sent = batches.and_then(|it| {
                        for b in it {
                            let rows = Rows::of(&b?, has_cycles, has_tsc, false)?;
                            tx.send(Ok(Some(Batch::Arrow(Box::new(rows)))))
                                .map_err(|_| anyhow::anyhow!("walk stopped"))?;
                        }
                        tx.send(Ok(None))
                            .map_err(|_| anyhow::anyhow!("walk stopped"))
                    });
                    if let Err(e) = sent {
                        // The walk reports the error (or has stopped already).
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            });
        }
        let mut events = Events::new(erx);
        let (mut seq, mut prev_cyc, mut evs) = (0u64, None, Vec::new());
        for g in 0..groups {
            loop {
                let rows = match rxs[g % readers].recv() {
                    Ok(Ok(Some(rows))) => rows,
                    Ok(Ok(None)) => break,
                    Ok(Err(e)) => return Err(e),
                    Err(_) => anyhow::bail!("a reader of {} stopped", t.path.display()),
                };
                let len = match &rows {
                    Batch::Arrow(rows) => rows.ip.len(),
                    Batch::Keyed(rows) => rows.len(),
                };
                // No row to apply events before: they wait for the next batch.
                if len == 0 {
                    continue;
                }
                evs.clear();
                // Events at a row are applied before it: those up to the batch's last.
                events.until(seq + len as u64, &mut evs);
                match rows {
                    Batch::Arrow(rows) => w.batch(&rows, 0..len, &evs, &mut seq, &mut prev_cyc),
                    Batch::Keyed(rows) => {
                        w.keyed_batch(&rows, &evs, &mut seq);
                        // Back to its reader for the next row group; when two wait
                        // there already, dropped.
                        let _ = backs[g % readers].try_send(rows);
                    }
                }
            }
        }
        // Readers still sending stop at their next send (on an error return too, when
        // the receivers go with this closure's locals).
        drop(rxs);
        // Events after the last row are never taken: the reader stops at its next send.
        drop(events);
        events_read.join().add_to(&mut w.st, warnings);
        Ok(())
    })
}
