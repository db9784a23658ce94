//! One run at a time per bundle: an exclusive claim taken before a bundle is decoded,
//! held until its catalog row is written, and released by removing the bundle's staging
//! directory.
//!
//! Operators do start the same night twice (a scheduler's retry, a person re-running by
//! hand, two shards given the same index). Without a claim the runs shared
//! `_staging/<id>/`: one removed it while the other wrote into it, and a failed attempt
//! took back table files the other run had committed, leaving `ok` catalog rows with no
//! table behind them.
//!
//! - **On this machine** (both kinds of dataset: staging is always local) the claim is a
//!   lock on `STAGING/<id>.lock` (`flock`, through `File::try_lock`). The kernel drops it
//!   when its process dies, however it dies, so a dead owner's claim is taken over with no
//!   guesswork; on NFS the server does the same when the client's lease runs out. The
//!   lock file names its owner (pid, host, time) for the messages of the runs that find
//!   it taken. It is removed, while still locked, when the claim is released; a run that
//!   opened the removed file before and locks it afterwards sees that the name now leads
//!   elsewhere (or nowhere) and tries again, so two runs never both hold a claim.
//! - **On S3** (runs on several machines) the claim is also an object,
//!   `_claims/<id>.json`, created with a conditional PUT (`If-None-Match: *`): exactly
//!   one run creates it. Its owner renews it every [`HEARTBEAT`] (`If-Match` on the ETag it
//!   holds). A claim is taken over (`If-Match` on the stale ETag: one taker wins) when its
//!   owner is a process of this machine that no longer runs, or when it has not been
//!   renewed for [`LEASE`] (a machine that died). An owner whose renewal fails learns that
//!   its claim was taken (it was presumed dead) and publishes nothing more.
//!
//! A run that finds a bundle claimed leaves it for last, then waits for the claim: by then
//! the other run has usually committed it, and the bundle is skipped.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::dest::Dest;
#[cfg(feature = "s3")]
use super::s3::S3Claim;

/// How often the owner of an S3 claim renews it.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
pub const HEARTBEAT: Duration = Duration::from_secs(20);
/// An S3 claim not renewed for this long belongs to a run that is gone.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
pub const LEASE: Duration = Duration::from_secs(120);

/// Who holds a claim: written in the lock file and the S3 claim object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub host: String,
    pub pid: u32,
    /// The process's start time (clock ticks since boot, `/proc/PID/stat`), so that a
    /// recycled pid is not taken for the owner.
    pub start: u64,
    /// Unix seconds when the claim was taken, and last renewed (S3).
    pub since: u64,
    pub renewed: u64,
}

impl Owner {
    pub(super) fn me() -> Owner {
        let now = unix_now();
        let pid = std::process::id();
        Owner {
            host: host_name(),
            pid,
            start: process_start(pid).unwrap_or(0),
            since: now,
            renewed: now,
        }
    }

    /// "pid 1234 on node-7 since 2026-11-26 09:00:00 UTC"
    pub fn describe(&self) -> String {
        format!(
            "pid {} on {} since {}",
            self.pid,
            self.host,
            utc_text(self.since)
        )
    }

    /// This machine's process that owned the claim is gone (or is another process now).
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    pub(super) fn dead_here(&self) -> bool {
        self.host == host_name() && process_start(self.pid) != Some(self.start)
    }
}

/// The outcome of trying to claim a bundle.
pub enum Taken {
    Mine(Claim),
    /// Another run holds it (who, when known).
    Busy(String),
}

/// A held claim; released on drop (the staging directory and the lock file removed).
pub struct Claim {
    staging: PathBuf,
    lock_path: PathBuf,
    lock: Option<File>,
    #[cfg(feature = "s3")]
    s3: Option<S3Claim>,
}

impl Claim {
    /// The bundle's staging directory, this run's alone while the claim is held.
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// False once another run took the claim over (an S3 renewal failed): nothing more of
    /// the bundle may be published.
    pub fn still_held(&self) -> bool {
        #[cfg(feature = "s3")]
        if self.s3.as_ref().is_some_and(S3Claim::lost) {
            return false;
        }
        true
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.staging);
        #[cfg(feature = "s3")]
        if let Some(s3) = self.s3.take() {
            s3.release();
        }
        // Removed while locked: see the module docs for why a run that opened it before
        // cannot then hold it too.
        let _ = std::fs::remove_file(&self.lock_path);
        drop(self.lock.take());
    }
}

/// Try to claim bundle `id` of `dest` without waiting.
pub fn try_claim(dest: &Dest, id: &str) -> Result<Taken> {
    let root = dest.staging_root();
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let lock_path = root.join(format!("{id}.lock"));
    let Some(lock) = lock_here(&lock_path)? else {
        let owner = std::fs::read_to_string(&lock_path)
            .ok()
            .and_then(|t| serde_json::from_str::<Owner>(&t).ok())
            .map_or_else(|| "another run".to_string(), |o| o.describe());
        return Ok(Taken::Busy(owner));
    };
    #[cfg_attr(not(feature = "s3"), allow(unused_mut))]
    let mut claim = Claim {
        staging: root.join(id),
        lock_path,
        lock: Some(lock),
        #[cfg(feature = "s3")]
        s3: None,
    };
    #[cfg(feature = "s3")]
    if let Some(s3) = dest.s3() {
        match s3.claim(id)? {
            Ok(s3) => claim.s3 = Some(s3),
            Err(owner) => {
                // Not ours after all: leave the staging directory alone (the lock file goes).
                claim.staging = PathBuf::new();
                return Ok(Taken::Busy(owner));
            }
        }
    }
    Ok(Taken::Mine(claim))
}

/// Claim bundle `id`, waiting while another run holds it (polling, from 50 ms up to 2 s
/// between tries).
pub fn claim_waiting(dest: &Dest, id: &str) -> Result<Claim> {
    let mut pause = Duration::from_millis(50);
    loop {
        if let Taken::Mine(c) = try_claim(dest, id)? {
            return Ok(c);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// Lock `path` (created if absent), or `None` when another process holds it.
fn lock_here(path: &Path) -> Result<Option<File>> {
    use std::os::unix::fs::MetadataExt;
    loop {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        match f.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()))
            }
        }
        // The holder before us may have removed the name (released) after we opened it:
        // our lock is then on a file nobody else will ever look at. Try again.
        let mine = f
            .metadata()
            .with_context(|| format!("{}", path.display()))?;
        match std::fs::metadata(path) {
            Ok(now) if now.dev() == mine.dev() && now.ino() == mine.ino() => {}
            _ => continue,
        }
        let mut f = f;
        let text = serde_json::to_string(&Owner::me())? + "\n";
        f.set_len(0)
            .and_then(|()| f.write_all(text.as_bytes()))
            .with_context(|| format!("writing {}", path.display()))?;
        return Ok(Some(f));
    }
}

/// `2026-11-26 09:00:00 UTC` for Unix seconds `t` (days to a civil date: Howard
/// Hinnant's algorithm).
fn utc_text(t: u64) -> String {
    let (days, secs) = ((t / 86_400) as i64, t % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// This machine's name (`/proc/sys/kernel/hostname`; `HOSTNAME` elsewhere).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// When process `pid` of this machine started (field 22 of `/proc/PID/stat`), or `None`
/// when it does not run.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_exclusive_and_released_on_drop() {
        let d = tempfile::tempdir().unwrap();
        let dest = Dest::new(d.path().to_str().unwrap(), None).unwrap();
        let Taken::Mine(c) = try_claim(&dest, "abc").unwrap() else {
            panic!("free claim not taken");
        };
        std::fs::create_dir_all(c.staging()).unwrap();
        match try_claim(&dest, "abc").unwrap() {
            Taken::Mine(_) => panic!("claimed twice"),
            Taken::Busy(who) => assert!(
                who.contains(&format!("pid {}", std::process::id())),
                "{who}"
            ),
        }
        let staging = c.staging().to_path_buf();
        drop(c);
        assert!(!staging.exists(), "staging removed with the claim");
        assert!(matches!(try_claim(&dest, "abc").unwrap(), Taken::Mine(_)));
    }

    #[test]
    fn utc_text_is_the_civil_date() {
        assert_eq!(utc_text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_text(1_795_683_600), "2026-11-26 09:00:00 UTC");
        assert_eq!(utc_text(951_782_400), "2000-02-29 00:00:00 UTC");
    }

    #[test]
    fn owners_of_this_machine_are_alive_until_their_process_ends() {
        let me = Owner::me();
        assert!(!me.dead_here());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = Owner {
            pid: child.id(),
            ..me.clone()
        };
        child.wait().unwrap();
        assert!(gone.dead_here());
        let elsewhere = Owner {
            host: "some-other-host".into(),
            ..gone
        };
        assert!(
            !elsewhere.dead_here(),
            "only the lease tells for another machine"
        );
    }
}
