//! Error messages as the command line and the ingest catalog show them.

/// What failed, where and why, on one line ("what: why: why"), each cause once: errors
/// that print their source (thiserror's `"{path}: {source}"`) would otherwise say it
/// twice. A multi-line cause (a bundle.toml error showing its line) keeps its lines.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = text.trim_end();
        if text.is_empty() || out.contains(text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(text);
    }
    out
}

/// The trace holds no PSB packet: nothing can be decoded (`decode` exits 1). A type of its
/// own so that the Python package raises its own exception for it (`NoPsbError`).
#[derive(Debug, thiserror::Error)]
#[error("{path}: no PSB packet in {bytes} bytes: nothing to decode (is this an RTIT or Intel PT trace?)")]
pub struct NoPsb {
    /// The trace file, as opened.
    pub path: String,
    pub bytes: u64,
}

/// What to do about an error whose own words do not say it. Without credentials in the
/// environment the S3 client falls back to the EC2 instance-metadata service, and its
/// error names only that service's URL (`http://169.254.169.254/latest/api/token ... 403`),
/// nothing about the variables a user would set.
pub fn hint(e: &anyhow::Error) -> Option<&'static str> {
    let text = error_text(e);
    let metadata = ["169.254.169.254", "/latest/api/token", "/latest/meta-data/"];
    if metadata.iter().any(|m| text.contains(m)) {
        return Some(
            "no S3 credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
             (and AWS_SESSION_TOKEN for temporary ones), AWS_REGION, and AWS_ENDPOINT_URL for \
             a server other than AWS S3; without them only an EC2 instance role can provide \
             credentials",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metadata_service_error_gets_the_credentials_hint() {
        let e = anyhow::anyhow!(
            "Generic S3 error: Error performing PUT http://169.254.169.254/latest/api/token in 1ms - Server returned non-2xx status code: 403 Forbidden"
        )
        .context("dataset s3://night/fleet cannot be written");
        assert!(hint(&e).unwrap().contains("AWS_ACCESS_KEY_ID"));
        assert_eq!(hint(&anyhow::anyhow!("no PSB in the trace")), None);
    }
}
