//! A refusal of Envoy's beyond its field rules, and the path in the resource it is at.
//!
//! Must not: judge anything; the checks do.

/// What Envoy would refuse, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// From the resource, as in field-rule violations (`.` for the resource itself).
    pub path: String,
    /// Envoy's words.
    pub envoy: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Envoy would reject it with: {}", self.envoy)
    }
}

/// A path as field-rule violations print it: `a.b[2].c`.
pub(super) fn path_of(at: &[String]) -> String {
    if at.is_empty() {
        return ".".into();
    }
    let mut out = String::new();
    for segment in at {
        if !segment.starts_with('[') && !out.is_empty() {
            out.push('.');
        }
        out.push_str(segment);
    }
    out
}

/// `at` and then `more`.
pub(super) fn beyond(at: &[String], more: &[&str]) -> Vec<String> {
    let mut here = at.to_vec();
    here.extend(more.iter().map(|s| s.to_string()));
    here
}

/// Envoy refuses what is at `at`, in `envoy`'s words.
pub(super) fn refuse(at: &[String], envoy: String) -> Result<(), Refusal> {
    Err(Refusal {
        path: path_of(at),
        envoy,
    })
}
