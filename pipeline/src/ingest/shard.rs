//! `--shard I/N`: a stable share of the bundles, chosen by bundle id, so that N processes
//! (a Slurm array, a Kubernetes Indexed Job) split one night between them without talking
//! to each other.

use anyhow::{bail, Context, Result};

/// Shard `index` of `count` (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl Shard {
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parse `I/N`.
    pub fn parse(s: &str) -> Result<Shard> {
        let (i, n) = s
            .split_once('/')
            .with_context(|| format!("--shard {s:?}: expected I/N, like 0/4"))?;
        let index: u64 = i
            .trim()
            .parse()
            .with_context(|| format!("--shard {s:?}: {i:?} is not a number"))?;
        let count: u64 = n
            .trim()
            .parse()
            .with_context(|| format!("--shard {s:?}: {n:?} is not a number"))?;
        Shard::new(index, count).with_context(|| format!("--shard {s:?}"))
    }

    pub fn new(index: u64, count: u64) -> Result<Shard> {
        if count == 0 {
            bail!("the shard count must be at least 1");
        }
        if index >= count {
            bail!(
                "shard index {index} out of range: shards are numbered 0 to {}",
                count - 1
            );
        }
        Ok(Shard { index, count })
    }

    /// The shard to take: `--shard` if given; else a Slurm array task
    /// (`SLURM_ARRAY_TASK_ID` − `SLURM_ARRAY_TASK_MIN` of `SLURM_ARRAY_TASK_COUNT`); else a
    /// Kubernetes Indexed Job pod (`JOB_COMPLETION_INDEX` of `shards`, which must then be
    /// given); else everything.
    pub fn from_args_and_env(
        arg: Option<&str>,
        shards: Option<u64>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Shard> {
        if let Some(s) = arg {
            return Shard::parse(s);
        }
        let num = |name: &str| -> Result<Option<u64>> {
            match env(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .with_context(|| format!("{name}={v:?} is not a number")),
            }
        };
        if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let count = match shards {
                Some(n) => n,
                None => num("SLURM_ARRAY_TASK_COUNT")?
                    .context("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not")?,
            };
            let index = id.checked_sub(min).with_context(|| {
                format!("SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}")
            })?;
            return Shard::new(index, count).context("the Slurm array task");
        }
        if let Some(index) = num("JOB_COMPLETION_INDEX")? {
            let count = shards.context(
                "JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job): give the number of \
                 shards with --shards N (the Job's completions)",
            )?;
            return Shard::new(index, count).context("the Kubernetes job completion index");
        }
        match shards {
            Some(n) if n != 1 => bail!(
                "--shards {n} without --shard I/N, SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX: \
                 which shard is this?"
            ),
            _ => Ok(Shard::ALL),
        }
    }

    /// Whether the bundle with this id (hex) belongs to this shard.
    pub fn takes(&self, id: &str) -> bool {
        let head = id.get(..16).unwrap_or(id);
        let h = u64::from_str_radix(head, 16).unwrap_or(0);
        h % self.count == self.index
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn flag_then_slurm_then_kubernetes() {
        let none = env(&[]);
        assert_eq!(
            Shard::from_args_and_env(None, None, &none).unwrap(),
            Shard::ALL
        );
        assert_eq!(
            Shard::from_args_and_env(Some("2/4"), None, &none).unwrap(),
            Shard { index: 2, count: 4 }
        );
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("JOB_COMPLETION_INDEX", "0"),
        ]);
        assert_eq!(
            Shard::from_args_and_env(None, None, &slurm).unwrap(),
            Shard { index: 2, count: 4 }
        );
        // The flag wins over the environment.
        assert_eq!(
            Shard::from_args_and_env(Some("0/2"), None, &slurm).unwrap(),
            Shard { index: 0, count: 2 }
        );
        let k8s = env(&[("JOB_COMPLETION_INDEX", "5")]);
        assert!(Shard::from_args_and_env(None, None, &k8s).is_err());
        assert_eq!(
            Shard::from_args_and_env(None, Some(8), &k8s).unwrap(),
            Shard { index: 5, count: 8 }
        );
        assert!(Shard::from_args_and_env(None, Some(4), &k8s).is_err());
        assert!(Shard::from_args_and_env(None, Some(4), &none).is_err());
        for bad in ["1", "4/4", "x/2", "0/0", "-1/2"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_id_is_in_exactly_one_shard() {
        for i in 0..200u64 {
            let id = format!(
                "{:032x}",
                i.wrapping_mul(0x9e37_79b9_7f4a_7c15) as u128 * 977
            );
            for count in 1..6 {
                let n = (0..count)
                    .filter(|&index| Shard { index, count }.takes(&id))
                    .count();
                assert_eq!(n, 1);
            }
        }
    }
}
