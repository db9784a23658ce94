//! The global allocator of tracemill's programs (the CLI, the Python module, the pipeline
//! benchmarks): mimalloc, with its purge delay set here.
//!
//! Not glibc's malloc: rows are allocated on the decode threads and freed on the writer's,
//! piece after piece, for hours, and glibc kept the freed memory of every arena, so the
//! heap grew with the trace (the 1 GiB synthetic trace, `-j2 --out`, peaked at 912 MiB and
//! was still growing at its end). jemalloc, the allocator before this one, gave that memory
//! back (467 MiB) but its C build (configure and make) was the longest single step of a
//! first `cargo install`: 74 CPU s of 712, a tenth of the five minutes the README
//! promises. mimalloc is one C file: 6 CPU s. On the 200 MB synthetic trace (`-j2 --out`,
//! all tables) mimalloc's default delay of 1 s before it returns freed pages peaked at
//! 499–519 MiB against jemalloc's 400–403 MiB; 100 ms gives 445–448 MiB for the same CPU
//! time (user + sys 163–172 s against jemalloc's 156–173 s); 0 (return at once) 387 MiB but
//! 41 s of system time in `madvise`. On the 1 GiB trace (`-j2 --out`, 410 s) RssAnon
//! sampled every 15 s rose to 474–531 MiB and stayed there (jemalloc's peak: 467 MiB),
//! within the 600 MB the project allows (benches/README.md, "Build times: earlier
//! figures").

/// mimalloc's option `purge_delay` (`mi_option_purge_delay`, which libmimalloc-sys 0.1.49
/// does not name): its index in mimalloc 3's `mi_option_e` (mimalloc.h). The version is
/// pinned in Cargo.toml so that a new one is read before it is taken, and a test checks
/// the index against the options mimalloc lists (tests/options.rs).
pub const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The delay, in milliseconds, before freed memory goes back to the system.
pub const PURGE_DELAY_MS: i64 = 100;

/// mimalloc's option `allow_thp` (transparent huge pages), by its index as above.
pub const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Sets the allocator's options, unless the user set them (mimalloc reads
/// `MIMALLOC_PURGE_DELAY` and `MIMALLOC_ALLOW_THP` from the environment when the process
/// starts). Call it first thing in `main` of a program of ours (not in the Python module:
/// it changes the whole process): it only changes when freed pages are returned and how
/// new ones are mapped, so allocations made before it are unaffected.
///
/// Transparent huge pages are turned off: mimalloc asked for them, and the kernel then
/// maps and clears 2 MiB at a time where rows need a few pages, and keeps them until the
/// whole huge page is free. Without them the 1 GiB synthetic trace's decode peaked at 569
/// MiB, not 648, and the 92 MB Intel PT file's at a fifth less in the same time
/// (benches/README.md, Throughput III's sixth round).
#[allow(unsafe_code)]
pub fn configure() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: `mi_option_set` stores a value in mimalloc's option table (an atomic
        // store); any option index below `_mi_option_last` is valid, and 15 is.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as _) }
    }
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: as above; 43 is below `_mi_option_last`. mimalloc reads the option when
        // it maps memory (whether to ask for huge pages); the prctl, which mimalloc makes
        // itself when the variable is set at start, keeps the kernel from giving this
        // process huge pages unasked (THP `always`). It takes no pointer.
        unsafe {
            libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0);
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

/// Whether mimalloc may ask for transparent huge pages (its own reading of the option).
#[allow(unsafe_code)]
pub fn allow_thp() -> bool {
    // SAFETY: reads mimalloc's option table; the index is valid (see `configure`).
    unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP) != 0 }
}

/// The purge delay in force (mimalloc's own reading of the option).
#[allow(unsafe_code)]
pub fn purge_delay_ms() -> i64 {
    // SAFETY: reads mimalloc's option table; the index is valid (see `configure`).
    unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) as i64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `configure` sets the option at index 15 (that 15 is `purge_delay` in the mimalloc
    /// linked into the binary is checked by running it: tests/options.rs,
    /// `the_allocator_options_set_are_the_purge_delay_and_allow_thp`).
    #[test]
    fn configure_sets_the_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        configure();
        assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
    }

    #[test]
    fn configure_turns_transparent_huge_pages_off() {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            return;
        }
        configure();
        assert!(!allow_thp());
        #[allow(unsafe_code)]
        // SAFETY: PR_GET_THP_DISABLE takes no argument and reads a flag.
        let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(disabled, 1);
    }
}
