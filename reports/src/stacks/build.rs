//! Walking a decode's branches table into [`Stacks`]: readers ahead, the walk behind.

use std::fs::File;
use std::sync::atomic::Ordering;

use anyhow::Result;

use crate::input::Input;
use crate::parquet_keys::{self};

use super::{events::*, functions::*, rows::*, trie::*, walker::*, MAX_DEPTH};

/// Walk the branches table and build the stacks. `on_span` sees every frame that ends
/// (with `tsc` times when `times`: timelines; without, `tsc` is not read), and frames
/// still open at the end end at the last row. `cycles` reads the `cycles` column (the
/// weight of a flame graph by cycles); without it the stacks' cycles stay 0.
///
/// Reader threads decode the Parquet row groups ahead of the walk (reading took about as
/// long as walking), and another reads the events; the walk takes both in order.
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
    let thread = input.thread;
    let mut cols = vec!["ip", "target", "kind", "insns"];
    if has_cycles {
        cols.push("cycles");
    }
    if has_tsc {
        cols.push("tsc");
    }
    if thread.is_some() {
        cols.push("tid");
    }
    t.require(&cols)?;
    // Parquet row groups are read side by side, each by the reader `group % readers`,
    // and walked in order; Arrow IPC is one run of batches.
    let footer = t.parquet_footer()?;
    let groups = footer.as_ref().map_or(1, |m| m.metadata().num_row_groups());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // At least two with two row groups or more, so that the same code runs everywhere.
    let readers = groups.clamp(1, cores.clamp(2, 8));
    // Without cycles and times, row groups are read as dictionary keys (where they can
    // be: others go through arrow-rs).
    // (A thread filter reads `tid` too: through arrow-rs.)
    let by_keys = footer
        .as_ref()
        .filter(|_| !has_cycles && !has_tsc && thread.is_none());
    let mut reader = EventReader::open(input);
    std::thread::scope(|scope| -> Result<()> {
        let (etx, erx) = std::sync::mpsc::sync_channel::<Vec<Ev>>(4);
        let events_read = scope.spawn(move || {
            while let Some(b) = reader.next_batch() {
                // A closed channel: the walk stopped.
                if !b.is_empty() && etx.send(b).is_err() {
                    break;
                }
            }
            let by_keys = reader.by_keys.load(Ordering::Relaxed);
            let resolver = reader.resolver();
            (
                reader.warnings,
                resolver.seen,
                by_keys,
                resolver.out_of_order,
            )
        });
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
                            let rows = Rows::of(&b?, has_cycles, has_tsc, thread)?;
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
        let mut events = Events {
            batches: erx,
            batch: Vec::new(),
            at: 0,
        };
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
                    Batch::Arrow(rows) => w.batch(&rows, &evs, &mut seq, &mut prev_cyc),
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
        let read = events_read.join();
        let (read, n, by_keys, out_of_order) =
            read.unwrap_or_else(|p| std::panic::resume_unwind(p));
        warnings.extend(read);
        (w.st.events_read, w.st.events_by_keys) = (n, by_keys);
        warnings.extend(out_of_order);
        Ok(())
    })?;
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
