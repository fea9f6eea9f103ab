//! Why a container is not running: the waiting reasons a start failure reports (upstream
//! `images.ErrImagePull`, `kuberuntime.ErrCreateContainerConfig`, `CrashLoopBackOff`, ...) and the
//! errors that carry them, plus other reasons a pod status names.

use std::time::Duration;

/// A pod rejected because of a sysctl it may not set (upstream `sysctl.ForbiddenReason`).
pub const SYSCTL_FORBIDDEN: &str = "SysctlForbidden";

/// The upstream reasons a container can wait with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    ErrImagePull,
    ImagePullBackOff,
    ErrImageNeverPull,
    InvalidImageName,
    ImageInspectError,
    CrashLoopBackOff,
    CreateContainerConfigError,
    CreateContainerError,
    RunContainerError,
    PostStartHookError,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ErrImagePull => "ErrImagePull",
            Reason::ImagePullBackOff => "ImagePullBackOff",
            Reason::ErrImageNeverPull => "ErrImageNeverPull",
            Reason::InvalidImageName => "InvalidImageName",
            Reason::ImageInspectError => "ImageInspectError",
            Reason::CrashLoopBackOff => "CrashLoopBackOff",
            Reason::CreateContainerConfigError => "CreateContainerConfigError",
            Reason::CreateContainerError => "CreateContainerError",
            Reason::RunContainerError => "RunContainerError",
            Reason::PostStartHookError => "PostStartHookError",
        }
    }
}

/// Why a container did not start: its reason, message, and when trying again makes sense.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {message}", reason.as_str())]
pub struct StartError {
    pub reason: Reason,
    pub message: String,
    pub retry_after: Option<Duration>,
}

impl StartError {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        StartError {
            reason,
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn retry_after(mut self, d: Duration) -> Self {
        self.retry_after = Some(d);
        self
    }
}

/// Why a config could not be built; surfaces as `CreateContainerConfigError`.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct ConfigError(pub String);
