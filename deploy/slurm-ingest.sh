#!/usr/bin/env bash
# A night's bundles into one dataset, as a Slurm job array: task i of N ingests the
# bundles whose id falls in shard i (tracemill reads SLURM_ARRAY_TASK_ID,
# SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_COUNT itself). Tasks share nothing but the
# dataset; a task that dies is simply run again (committed bundles are skipped).
#
#   sbatch --array=0-15 deploy/slurm-ingest.sh /fleet/2026-11-23 s3://traces/fleet
#   sbatch --array=0-15 deploy/slurm-ingest.sh /fleet/2026-11-23 /shared/datasets/fleet
#
# Exit status per task: 0 every bundle ok, 3 some bundles failed (their catalog rows say
# why; the rest are committed), 1 nothing could be done. For S3, set AWS_REGION,
# AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL for a non-AWS store) in
# the submitting environment; sbatch passes it on; and use a tracemill built with S3
# support (`cargo install --path pipeline --locked --features s3`).
#
#SBATCH --job-name=tracemill-ingest
#SBATCH --cpus-per-task=8
#SBATCH --mem=8G
#SBATCH --time=06:00:00
#SBATCH --output=tracemill-ingest-%A_%a.log
set -euo pipefail

SOURCE=${1:?usage: sbatch --array=0-N deploy/slurm-ingest.sh SOURCE DEST [ingest options]}
DEST=${2:?usage: sbatch --array=0-N deploy/slurm-ingest.sh SOURCE DEST [ingest options]}
shift 2
TRACEMILL=${TRACEMILL:-tracemill}

# Partition keys must be the same for every task and every night written into DEST. Set
# PARTITION_BY in the submitting environment, not with --export=...,PARTITION_BY=a,b
# (sbatch splits --export at commas).
exec "$TRACEMILL" ingest "$SOURCE" --dataset "$DEST" \
  --partition-by "${PARTITION_BY:-date,host}" \
  --jobs "${SLURM_CPUS_PER_TASK:-1}" --quiet "$@"
