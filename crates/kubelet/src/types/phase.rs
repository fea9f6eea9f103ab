//! Pod phase and restart policy as enums (upstream `v1.PodPhase`, `v1.RestartPolicy`), so code
//! matches on variants instead of comparing strings; `parse` and `as_str` use the API spelling.

/// `status.phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    /// The API value; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "Pending" => PodPhase::Pending,
            "Running" => PodPhase::Running,
            "Succeeded" => PodPhase::Succeeded,
            "Failed" => PodPhase::Failed,
            "Unknown" => PodPhase::Unknown,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PodPhase::Pending => "Pending",
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
            PodPhase::Failed => "Failed",
            PodPhase::Unknown => "Unknown",
        }
    }

    /// Succeeded or Failed: the pod's containers will not run again (upstream
    /// `podutil.IsPodPhaseTerminal`).
    pub fn is_terminal(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }

    /// The phase of a pod status, if it names one.
    pub fn of(status: Option<&k8s_openapi::api::core::v1::PodStatus>) -> Option<Self> {
        status
            .and_then(|s| s.phase.as_deref())
            .and_then(Self::parse)
    }
}

/// `spec.restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RestartPolicy {
    /// The API default.
    #[default]
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    /// The API value; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "Always" => RestartPolicy::Always,
            "OnFailure" => RestartPolicy::OnFailure,
            "Never" => RestartPolicy::Never,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RestartPolicy::Always => "Always",
            RestartPolicy::OnFailure => "OnFailure",
            RestartPolicy::Never => "Never",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_spellings_round_trip() {
        for p in [
            PodPhase::Pending,
            PodPhase::Running,
            PodPhase::Succeeded,
            PodPhase::Failed,
            PodPhase::Unknown,
        ] {
            assert_eq!(PodPhase::parse(p.as_str()), Some(p));
        }
        for r in [
            RestartPolicy::Always,
            RestartPolicy::OnFailure,
            RestartPolicy::Never,
        ] {
            assert_eq!(RestartPolicy::parse(r.as_str()), Some(r));
        }
        assert_eq!(PodPhase::parse("running"), None);
        assert_eq!(RestartPolicy::parse("never"), None);
        assert_eq!(RestartPolicy::default(), RestartPolicy::Always);
        assert!(PodPhase::Failed.is_terminal() && !PodPhase::Running.is_terminal());
    }
}
