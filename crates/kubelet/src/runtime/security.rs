//! A container's Linux security context (upstream `kuberuntime/security_context.go`,
//! `pkg/securitycontext/util.go`, `kuberuntime_security_profile`/`helpers.go` for seccomp and
//! `pkg/security/apparmor` for AppArmor): pod-level settings merged under the container's,
//! the image's user where the spec names none, and runAsNonRoot enforced before create.

use std::path::Path;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Container, Pod, SeccompProfile, SecurityContext,
};
use rkubelet_cri::api;

use crate::podutil;
use crate::types::annotations::APPARMOR_ANNOTATION_PREFIX;
use crate::types::ConfigError;

/// The user an image runs as (upstream `getImageUser`): a numeric uid, else a user name; an
/// image that sets neither runs as root, so that is uid 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageUser {
    pub uid: Option<i64>,
    pub username: String,
}

impl ImageUser {
    /// From CRI ImageStatus: `uid` when the image user is numeric, `username` when it is a name.
    pub fn from_image(image: Option<&api::Image>) -> ImageUser {
        match image {
            Some(i) if i.uid.is_some() => ImageUser {
                uid: i.uid.as_ref().map(|u| u.value),
                username: String::new(),
            },
            Some(i) if !i.username.is_empty() => ImageUser {
                uid: None,
                username: i.username.clone(),
            },
            _ => ImageUser {
                uid: Some(0),
                username: String::new(),
            },
        }
    }
}

/// The runtime's default masked paths, which upstream passes explicitly for `procMount: Default`
/// (`securitycontext.defaultMaskedPaths`, kept in sync with moby).
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// Upstream `securitycontext.defaultReadonlyPaths`.
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Pod-level fields under the container's (upstream `DetermineEffectiveSecurityContext`): the pod
/// contributes SELinux options, runAsUser, runAsGroup and runAsNonRoot; everything else is the
/// container's own.
pub fn effective(pod: &Pod, c: &Container) -> SecurityContext {
    let mut sc = SecurityContext::default();
    if let Some(p) = pod.spec.as_ref().and_then(|s| s.security_context.as_ref()) {
        sc.se_linux_options = p.se_linux_options.clone();
        sc.windows_options = p.windows_options.clone();
        sc.run_as_user = p.run_as_user;
        sc.run_as_group = p.run_as_group;
        sc.run_as_non_root = p.run_as_non_root;
    }
    let Some(csc) = c.security_context.as_ref() else {
        return sc;
    };
    macro_rules! over {
        ($($f:ident),*) => { $( if csc.$f.is_some() { sc.$f = csc.$f.clone(); } )* };
    }
    over!(
        se_linux_options,
        windows_options,
        capabilities,
        privileged,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount,
        seccomp_profile,
        app_armor_profile
    );
    sc
}

/// Upstream `verifyRunAsNonRoot`, with its messages.
pub fn verify_run_as_non_root(
    pod: &Pod,
    c: &Container,
    image: &ImageUser,
) -> Result<(), ConfigError> {
    let sc = effective(pod, c);
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    let who = format!(
        "(pod: \"{}_{}({})\", container: {})",
        podutil::name(pod),
        podutil::namespace(pod),
        podutil::uid(pod),
        c.name
    );
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            return Err(ConfigError(format!(
                "container's runAsUser breaks non-root policy {who}"
            )));
        }
        return Ok(());
    }
    match (image.uid, image.username.as_str()) {
        (Some(0), _) => Err(ConfigError(format!(
            "container has runAsNonRoot and image will run as root {who}"
        ))),
        (None, name) if !name.is_empty() => Err(ConfigError(format!(
            "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root {who}"
        ))),
        _ => Ok(()),
    }
}

/// The CRI security context (upstream `determineEffectiveSecurityContext`). `seccomp_root` is
/// `<root-dir>/seccomp`, where Localhost seccomp profiles live; `seccomp_default` is
/// `seccompDefault` (no profile set means RuntimeDefault).
pub fn linux_security_context(
    pod: &Pod,
    c: &Container,
    image: &ImageUser,
    seccomp_root: &Path,
    seccomp_default: bool,
) -> Result<api::LinuxContainerSecurityContext, ConfigError> {
    let sc = effective(pod, c);
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut out = api::LinuxContainerSecurityContext {
        capabilities: sc.capabilities.as_ref().map(|caps| api::Capability {
            add_capabilities: caps.add.clone().unwrap_or_default(),
            drop_capabilities: caps.drop.clone().unwrap_or_default(),
            ..Default::default()
        }),
        selinux_options: sc.se_linux_options.as_ref().map(|o| api::SeLinuxOption {
            user: o.user.clone().unwrap_or_default(),
            role: o.role.clone().unwrap_or_default(),
            r#type: o.type_.clone().unwrap_or_default(),
            level: o.level.clone().unwrap_or_default(),
        }),
        run_as_user: sc.run_as_user.map(|value| api::Int64Value { value }),
        run_as_group: sc.run_as_group.map(|value| api::Int64Value { value }),
        privileged: sc.privileged.unwrap_or(false),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        namespace_options: Some(super::sandbox::pod_namespace_options(pod)),
        // Upstream `AddNoNewPrivileges`: only an explicit allowPrivilegeEscalation: false sets it.
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        seccomp: Some(seccomp_profile(
            c.security_context
                .as_ref()
                .and_then(|s| s.seccomp_profile.as_ref())
                .or_else(|| pod_sc.and_then(|s| s.seccomp_profile.as_ref())),
            seccomp_root,
            seccomp_default,
        )?),
        ..Default::default()
    };
    let (apparmor, deprecated) = apparmor_profile(pod, c)?;
    out.apparmor = apparmor;
    // Upstream still fills the deprecated string for runtimes that predate the typed field.
    #[allow(deprecated)]
    {
        out.apparmor_profile = deprecated;
    }
    if out.run_as_user.is_none() {
        out.run_as_user = image.uid.map(|value| api::Int64Value { value });
        out.run_as_username = image.username.clone();
    }
    if let Some(p) = pod_sc {
        out.supplemental_groups.extend(p.fs_group);
        out.supplemental_groups
            .extend(p.supplemental_groups.iter().flatten());
    }
    let unmasked = sc.proc_mount.as_deref() == Some("Unmasked");
    let paths = |v: &[&str]| {
        if unmasked {
            Vec::new()
        } else {
            v.iter().map(|s| s.to_string()).collect()
        }
    };
    out.masked_paths = paths(DEFAULT_MASKED_PATHS);
    out.readonly_paths = paths(DEFAULT_READONLY_PATHS);
    Ok(out)
}

/// Upstream `getSeccompProfile` + `fieldSeccompProfile`: the container's profile, else the pod's;
/// with neither, RuntimeDefault under `seccompDefault` (`fallback_to_runtime_default`) and
/// Unconfined without it. An explicit `Unconfined` stays Unconfined either way.
pub fn seccomp_profile(
    p: Option<&SeccompProfile>,
    root: &Path,
    fallback_to_runtime_default: bool,
) -> Result<api::SecurityProfile, ConfigError> {
    use api::security_profile::ProfileType;
    let profile = |t: ProfileType, r: String| api::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: r,
    };
    Ok(
        match p.map(|p| (p.type_.as_str(), p.localhost_profile.as_deref())) {
            None if fallback_to_runtime_default => {
                profile(ProfileType::RuntimeDefault, String::new())
            }
            Some(("RuntimeDefault", _)) => profile(ProfileType::RuntimeDefault, String::new()),
            Some(("Localhost", Some(name))) if !name.is_empty() => profile(
                ProfileType::Localhost,
                root.join(name).to_string_lossy().into_owned(),
            ),
            Some(("Localhost", _)) => {
                return Err(ConfigError(
                    "localhostProfile must be set if seccompProfile type is Localhost.".into(),
                ))
            }
            _ => profile(ProfileType::Unconfined, String::new()),
        },
    )
}

/// Upstream `apparmor.GetProfile` + `getAppArmorProfile`: container field, then the pod's beta
/// annotation, then the pod field. Returns the CRI profile and the deprecated string form.
pub fn apparmor_profile(
    pod: &Pod,
    c: &Container,
) -> Result<(Option<api::SecurityProfile>, String), ConfigError> {
    use api::security_profile::ProfileType;
    let from_annotation = || -> Option<AppArmorProfile> {
        let v = pod
            .metadata
            .annotations
            .as_ref()?
            .get(&format!("{APPARMOR_ANNOTATION_PREFIX}{}", c.name))?;
        Some(match v.as_str() {
            "runtime/default" => AppArmorProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            },
            "unconfined" => AppArmorProfile {
                type_: "Unconfined".into(),
                localhost_profile: None,
            },
            other => AppArmorProfile {
                type_: "Localhost".into(),
                localhost_profile: other.strip_prefix("localhost/").map(str::to_string),
            },
        })
    };
    let profile = c
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
        .or_else(from_annotation)
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref())
                .and_then(|s| s.app_armor_profile.clone())
        });
    let Some(p) = profile else {
        return Ok((None, String::new()));
    };
    let sp = |t: ProfileType, r: &str| api::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: r.to_string(),
    };
    Ok(match (p.type_.as_str(), p.localhost_profile.as_deref()) {
        ("RuntimeDefault", _) => (
            Some(sp(ProfileType::RuntimeDefault, "")),
            "runtime/default".into(),
        ),
        ("Unconfined", _) => (Some(sp(ProfileType::Unconfined, "")), "unconfined".into()),
        ("Localhost", Some(name)) => (
            Some(sp(ProfileType::Localhost, name)),
            format!("localhost/{name}"),
        ),
        ("Localhost", None) => {
            return Err(ConfigError(
                "missing localhost apparmor profile name".into(),
            ))
        }
        (other, _) => {
            return Err(ConfigError(format!(
                "unknown apparmor profile type: {other:?}"
            )))
        }
    })
}

#[cfg(test)]
#[path = "security_tests.rs"]
mod tests;
