//! Arrow schemas of the output tables. Each field carries a `description` metadata entry,
//! which is the column's documentation (and ends up in the Parquet footer).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// Data type of every enum column: dictionary-encoded strings.
pub fn enum_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8))
}

fn f(name: &str, dt: DataType, nullable: bool, doc: &str) -> Field {
    Field::new(name, dt, nullable).with_metadata(HashMap::from([(
        "description".to_string(),
        doc.to_string(),
    )]))
}

fn u64f(name: &str, nullable: bool, doc: &str) -> Field {
    f(name, DataType::UInt64, nullable, doc)
}

fn schema(table: &str, fields: Vec<Field>) -> SchemaRef {
    Arc::new(Schema::new(fields).with_metadata(HashMap::from([(
        crate::meta::TABLE.to_string(),
        table.to_string(),
    )])))
}

/// `branches`: one row per executed branch instruction, in execution order.
pub fn branches() -> SchemaRef {
    schema(
        "branches",
        vec![
            u64f("seq", false, "Position in execution order, from 0."),
            u64f("ip", false, "Address of the branch instruction."),
            u64f(
                "target",
                true,
                "Next executed address after the branch; null when tracing stopped at it \
                 (e.g. a syscall out of user-only tracing).",
            ),
            f(
                "kind",
                enum_type(),
                false,
                "cond, jmp, call, jmp_ind, call_ind, ret, far, syscall.",
            ),
            f(
                "taken",
                DataType::Boolean,
                false,
                "The branch transferred control (false only for a not-taken cond).",
            ),
            f(
                "compressed",
                DataType::Boolean,
                false,
                "A ret resolved through return compression (a taken TNT bit and the last \
                 call's return address) rather than a TIP.",
            ),
            f(
                "insns",
                DataType::UInt32,
                false,
                "Instructions retired since the previous row, this one included. Carries \
                 across disable/enable; after a gap (overflow, error) counts from the \
                 resume point.",
            ),
            u64f(
                "tsc",
                true,
                "Time stamp counter when the branch retired. Exact at rows whose own packet \
                 was timed; between timing points interpolated by instruction count within \
                 the bounds of the neighbouring points; never decreasing. Null without \
                 timing packets.",
            ),
            u64f(
                "cycles",
                true,
                "Core cycles since the start of the trace (cycle-accurate mode, E6 \
                 corrected), exact where the row's own packet carries a CYC, interpolated \
                 between; null without cycle-accurate mode.",
            ),
            u64f(
                "cr3",
                true,
                "CR3 from the last PIP before the packet that decided the row (for direct \
                 jumps and calls, the previous decided row's); null before the first PIP.",
            ),
            u64f(
                "offset",
                false,
                "Stream offset of the packet that decided the row (TNT, TIP, FUP); for \
                 direct jumps and calls, that of the previous decided row.",
            ),
            f(
                "in_tx",
                DataType::Boolean,
                false,
                "The branch retired inside a TSX transaction (Intel PT MODE.TSX): its \
                 effects are speculative until the transaction commits (an events row \
                 `tsx` commit or abort says which).",
            ),
        ],
    )
}

/// `events`: trace-level facts between branches.
pub fn events() -> SchemaRef {
    schema(
        "events",
        vec![
            u64f(
                "seq",
                false,
                "Number of branch rows before the event (the event follows row seq-1).",
            ),
            u64f("offset", false, "Stream offset of the packet or problem."),
            f(
                "kind",
                enum_type(),
                false,
                "psb, enable, disable, overflow, trace_stop, paging, freq_change, error, \
                 resync, interrupt, exec_mode, tsx, ptwrite, power, maintenance, trigger, \
                 intr, iret, smi, rsm, sipi, init, vmentry, vmexit, shutdown, uintr, uiret, \
                 swintr, syscall, iflags.",
            ),
            u64f("ip", true, "Address the event refers to, when it has one."),
            u64f("tsc", true, "Time stamp counter at the event, when known."),
            f(
                "detail",
                DataType::Utf8,
                false,
                "Human-readable detail: the error's cause, the new CR3, the new ratio.",
            ),
        ],
    )
}

/// `timing`: one row per MTC, STS, CYC and FUP.PCC packet.
pub fn timing() -> SchemaRef {
    schema(
        "timing",
        vec![
            u64f("offset", false, "Stream offset of the packet."),
            f("kind", enum_type(), false, "mtc, sts, cyc, pcc."),
            u64f(
                "raw",
                false,
                "Payload as sent: MTC's 8 bits, STS's TSC[39:0], CYC's count, PCC's IP.",
            ),
            u64f(
                "value",
                false,
                "Interpreted payload: CYC count with the E6 fix (+1 when non-zero), MTC \
                 bits shifted into TSC position, STS TSC, PCC's IP.",
            ),
            u64f(
                "tsc",
                true,
                "Reconstructed 64-bit TSC at the packet; null until the first STS.",
            ),
            u64f(
                "cycles",
                true,
                "Cumulative core cycles at the packet (cycle-accurate mode).",
            ),
            f(
                "core_bus_ratio",
                DataType::UInt8,
                true,
                "Actual core/bus ratio from the last STS.",
            ),
        ],
    )
}

/// `coverage`: one row per basic block executed.
pub fn coverage() -> SchemaRef {
    schema(
        "coverage",
        vec![
            f(
                "image",
                enum_type(),
                true,
                "Name of the image holding the block; null when none does.",
            ),
            u64f(
                "image_offset",
                true,
                "Block start minus the image's load base.",
            ),
            u64f(
                "start",
                false,
                "First instruction: an entry (trace start, branch target, fall-through of \
                 a not-taken branch, resume point).",
            ),
            u64f(
                "end",
                false,
                "Last instruction: the branch that ends the block.",
            ),
            f(
                "insns",
                DataType::UInt32,
                false,
                "Instructions in the block.",
            ),
            u64f("count", false, "Times the block was executed."),
        ],
    )
}

/// `edges`: one row per distinct (src, dst, kind) control transfer.
pub fn edges() -> SchemaRef {
    schema(
        "edges",
        vec![
            u64f("src", false, "Address of the branch instruction."),
            u64f("dst", false, "Next executed address."),
            f(
                "kind",
                enum_type(),
                false,
                "Branch kind, as in branches.kind.",
            ),
            u64f("count", false, "Times this edge was taken."),
        ],
    )
}

/// The tables whose rows happen at a place in the trace (`branches`, `events`, `timing`):
/// those that gain [`thread_fields`] when decoded from a perf.data.
pub const ROW_TABLES: [&str; 3] = ["branches", "events", "timing"];

/// The columns a decode of a perf.data appends to every row table ([`ROW_TABLES`]): which
/// CPU's trace the row comes from, and which thread ran there then (perf's sideband).
pub fn thread_fields() -> Vec<Field> {
    vec![
        f(
            "cpu",
            DataType::UInt32,
            true,
            "perf.data: the CPU whose trace the row comes from (null for a per-thread \
             recording, `perf record --per-thread`).",
        ),
        f(
            "pid",
            DataType::UInt32,
            true,
            "perf.data: process that ran on the CPU at the row's tsc, from the context \
             switch and ITRACE_START records; null where the sideband cannot say (no tsc, \
             before the first switch record).",
        ),
        f(
            "tid",
            DataType::UInt32,
            true,
            "perf.data: thread that ran on the CPU at the row's tsc (see pid).",
        ),
        u64f(
            "time",
            true,
            "perf.data: the row's tsc as perf time (ns of the kernel's perf clock, \
             TIME_CONV), the time `perf script` prints; null without tsc.",
        ),
    ]
}

/// `table`'s schema with [`thread_fields`] appended (the same schema for the tables not
/// in [`ROW_TABLES`]).
pub fn with_thread_fields(table: &str) -> Option<SchemaRef> {
    let base = by_name(table)?;
    if !ROW_TABLES.contains(&table) {
        return Some(base);
    }
    let mut fields: Vec<Field> = base.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(thread_fields());
    Some(Arc::new(
        Schema::new(fields).with_metadata(base.metadata().clone()),
    ))
}

/// Schema of a table by name.
pub fn by_name(table: &str) -> Option<SchemaRef> {
    Some(match table {
        "branches" => branches(),
        "events" => events(),
        "timing" => timing(),
        "coverage" => coverage(),
        "edges" => edges(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_is_documented_and_addresses_are_u64() {
        for t in crate::TABLES {
            let s = by_name(t).unwrap();
            for fld in s.fields() {
                assert!(
                    fld.metadata().contains_key("description"),
                    "{t}.{} undocumented",
                    fld.name()
                );
            }
        }
        let b = branches();
        for c in ["ip", "target", "offset", "seq"] {
            assert_eq!(b.field_with_name(c).unwrap().data_type(), &DataType::UInt64);
        }
    }
}
