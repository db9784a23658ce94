//! Call stacks rebuilt from the `branches` rows, folded stacks and the flame graph.
//!
//! The walker keeps a stack of frames (function, expected return address). Every row's
//! `insns` (the instructions up to and including its branch) go to the stack current
//! before the row's branch, so the stacks' total is the trace's instruction count. Rules:
//!
//! - **call / call_ind** push a frame for the target's function, expecting a return to
//!   the instruction after the call.
//! - **ret** pops to the innermost frame expecting its target (frames above it are
//!   dropped: they returned without a traced `ret`, or were unwound). A **mismatched
//!   return** (no frame expects the target, e.g. leaving a function entered before tracing
//!   began) pops the top frame only.
//! - **jmp / jmp_ind** to another function: at its first instruction a **tail call**
//!   (the top frame now is that function); into the middle of a function that a frame
//!   below runs, a **longjmp** (unwind to that frame); otherwise the top frame moves.
//! - **far** (interrupts, kernel entry/exit) and **tracing resumed elsewhere** (a
//!   FUP.PGE away from where tracing stopped: a **signal** handler under user-only
//!   tracing) push an *async* frame that expects to resume where execution left; a
//!   later far transfer or resume there pops it (`rt_sigreturn`, `iret`).
//! - **Gaps** (an `error`, `overflow` or `resync` event) lose the stack: the walk starts
//!   again from the next row's function, under a `[gap]` root.
//! - Before each row the top frame is made to hold the row's `ip` when a symbol says it
//!   belongs to another function (execution fell through or the rules above missed a
//!   transfer). Code without symbols keeps the name of the call target it was entered by.
//! - Stacks deeper than [`MAX_DEPTH`] keep their outermost frames and count the rest in
//!   the deepest one.

mod build;
mod events;
mod flame;
mod functions;
mod rows;
#[cfg(test)]
mod tests;
mod threads;
mod trie;
mod walker;

pub use build::build;
pub use flame::{flamegraph, stacks_of, svg_min_weight, write_svg, FlameSummary, StacksSum};
pub use functions::{FunctionAt, Functions};
pub use trie::{FoldedLines, Span, Stacks};

pub const MAX_DEPTH: usize = 256;
