//! The `rkubelet` binary: the upstream kubelet command line (`kubelet::flags`, a pflag-compatible
//! table) + `KubeletConfiguration` file and drop-ins (`kubelet::config::load`) -> `KubeletConfig`,
//! logging, signals. Precedence as upstream: flags > drop-ins > file > defaults.
//!
//! Signals: the first SIGTERM or SIGINT starts a graceful shutdown (servers stop accepting, open
//! connections get a grace period, tasks are joined with a deadline; pods keep running), bounded
//! by [`SHUTDOWN_BOUND`]; a second one exits at once.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use kubelet::config::{self, KubeletConfig, Sources};
use kubelet::flags::{self, FlagError, Parsed};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

mod logging;
mod process;

/// The whole shutdown after the first signal. The parts inside are bounded already (connections
/// 5 s plus 1 s to close, tasks 10 s then aborted and named in the log); this catches what those
/// bounds cannot (a task blocked outside an await point, a blocking thread), so a service manager
/// that restarts the kubelet never waits on it for long. When it passes the process exits with
/// status 1.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(15);

/// After the tasks returned, how long the runtime waits for blocking threads and detached tasks.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(1);

/// Waits for SIGTERM or SIGINT; returns its number (15 or 2).
async fn next_signal(
    term: &mut tokio::signal::unix::Signal,
    int: &mut tokio::signal::unix::Signal,
) -> i32 {
    use tokio::signal::unix::SignalKind;
    tokio::select! {
        _ = term.recv() => SignalKind::terminate().as_raw_value(),
        _ = int.recv() => SignalKind::interrupt().as_raw_value(),
    }
}

/// First signal: cancel and start the overall bound. Second signal: exit now with 128 + its
/// number (130 for SIGINT, 143 for SIGTERM), the status a shell reports for a death by that
/// signal, so scripts and service managers read it as "killed".
async fn handle_signals(cancel: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        error!("cannot install signal handlers");
        return;
    };
    let first = next_signal(&mut term, &mut int).await;
    info!(signal = first, bound = ?SHUTDOWN_BOUND,
        "signal received; stopping (pods keep running). Signal again to exit at once.");
    cancel.cancel();
    // A thread, not a task: it must fire even when the runtime's workers are stuck.
    let watchdog = std::thread::Builder::new()
        .name("shutdown-bound".into())
        .spawn(|| {
            std::thread::sleep(SHUTDOWN_BOUND);
            // What was aborted at the tasks' deadline is logged above; reaching this means
            // kubelet::run had not returned (a pod worker or a task stuck beyond an abort).
            error!(bound = ?SHUTDOWN_BOUND, "shutdown did not finish in time; exiting with work still running (pods keep running)");
            logging::flush();
            std::process::exit(1);
        });
    if let Err(e) = watchdog {
        warn!(error = %e, "cannot start the shutdown bound's thread; shutdown is unbounded");
    }
    let second = next_signal(&mut term, &mut int).await;
    error!(signal = second, "second signal; exiting now");
    logging::flush();
    std::process::exit(128 + second);
}

fn node_name(flag: Option<&str>) -> String {
    let raw = match flag {
        Some(n) if !n.trim().is_empty() => n.trim().to_string(),
        _ => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "localhost".into()),
    };
    raw.to_lowercase()
}

/// `Kubernetes v1.33.0 (rkubelet 0.1.0)`: the kubelet release whose behaviour rkubelet follows
/// (what node status reports as `kubeletVersion`), then rkubelet's own version.
fn version_line() -> String {
    format!(
        "Kubernetes {} (rkubelet {})",
        kubelet::node::status::KUBELET_VERSION,
        env!("CARGO_PKG_VERSION")
    )
}

fn usage() -> String {
    let mut s = String::from(
        "rkubelet: a Kubernetes node agent (kubelet) in Rust, taking the upstream kubelet's flags.\n\n\
         Usage:\n  rkubelet [flags]\n\nFlags (status per docs/flags.md):\n",
    );
    for f in flags::FLAGS
        .iter()
        .filter(|f| f.status != flags::Status::Removed)
    {
        let name = match f.short {
            Some(c) => format!("-{c}, --{}", f.name),
            None => format!("    --{}", f.name),
        };
        s.push_str(&format!("  {name:<52} {}\n", f.status.as_str()));
    }
    s
}

/// Defaults, `--config`, `--config-dir`, the config-field flags, then the flag-only settings.
fn effective_config(parsed: &Parsed) -> anyhow::Result<(KubeletConfig, Vec<String>)> {
    let path = |name: &str| {
        parsed
            .last(name)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    };
    let loaded = config::load(&Sources {
        file: path("config"),
        dir: path("config-dir"),
        flags: parsed.fields.clone(),
    })?;
    let mut cfg = loaded.config;
    if let Some(k) = path("kubeconfig") {
        cfg.kubeconfig = Some(k);
    }
    if let Some(d) = path("root-dir") {
        cfg.root_dir = d;
    }
    if let Some(i) = parsed.last("pod-infra-container-image") {
        cfg.pod_infra_container_image = i.to_string();
    }
    if let Some(d) = path("container-logs-dir") {
        cfg.container_logs_dir = d;
    }
    // Upstream's container GC policy exists only as these deprecated flags.
    if let Some(v) = parsed.last("minimum-container-ttl-duration") {
        cfg.container_gc.min_age = config::parse_duration(v)
            .map_err(|e| anyhow::anyhow!("--minimum-container-ttl-duration: {e}"))?;
    }
    for (name, out) in [
        (
            "maximum-dead-containers-per-container",
            &mut cfg.container_gc.max_per_pod_container,
        ),
        (
            "maximum-dead-containers",
            &mut cfg.container_gc.max_containers,
        ),
    ] {
        if let Some(v) = parsed.last(name) {
            *out = v
                .trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("--{name}: {v:?} is not an integer"))?;
        }
    }
    if let Some(p) = parsed.last("image-credential-provider-config") {
        cfg.image_credential_provider_config = Some(PathBuf::from(p));
    }
    if let Some(p) = parsed.last("image-credential-provider-bin-dir") {
        cfg.image_credential_provider_bin_dir = Some(PathBuf::from(p));
    }
    if let Some(v) = parsed.last("vmodule") {
        cfg.logging.vmodule =
            config::logging::parse_vmodule(v).map_err(|e| anyhow::anyhow!("--vmodule: {e}"))?;
    }
    if let Some(c) = parsed.last("runtime-cgroups") {
        cfg.runtime_cgroups = c.to_string();
    }
    if let Some(ips) = parsed.last("node-ip").filter(|s| !s.is_empty()) {
        // Upstream takes one IP or a dual-stack pair; rkubelet reports the first.
        let first = ips.split(',').next().unwrap_or_default().trim();
        let ip: IpAddr = first
            .parse()
            .map_err(|_| anyhow::anyhow!("--node-ip: {first:?} is not a valid IP address"))?;
        cfg.node_ip = Some(ip);
    }
    if let Some(values) = parsed.values.get("node-labels") {
        for v in values {
            let labels = kubelet::node::status::parse_labels(v)
                .map_err(|e| anyhow::anyhow!("--node-labels: {e}"))?;
            cfg.node_labels.extend(labels);
        }
        flags::validate_node_labels(&cfg.node_labels)
            .map_err(|e| anyhow::anyhow!("failed to validate kubelet flags: {e}"))?;
    }
    if let Some(rt) = parsed.last("container-runtime") {
        anyhow::ensure!(
            rt == "remote",
            "--container-runtime={rt}: rkubelet only drives CRI runtimes (\"remote\"), as upstream since 1.24"
        );
    }
    // TLS bootstrap (certificate/): 1.20's experimental- name still works, as upstream.
    if let Some(k) =
        path("bootstrap-kubeconfig").or_else(|| path("experimental-bootstrap-kubeconfig"))
    {
        cfg.bootstrap_kubeconfig = Some(k);
    }
    if let Some(d) = path("cert-dir") {
        cfg.cert_dir = Some(d);
    }
    if cfg.bootstrap_kubeconfig.is_some() && cfg.kubeconfig.is_none() {
        anyhow::bail!("--bootstrap-kubeconfig needs --kubeconfig: the path the bootstrapped kubeconfig is written to");
    }
    cfg.node_name = node_name(parsed.last("hostname-override"));
    let mut errors = Vec::new();
    config::validate(&cfg, &mut errors);
    if !errors.is_empty() {
        anyhow::bail!("invalid configuration:\n  {}", errors.join("\n  "));
    }
    Ok((cfg, loaded.warnings))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match flags::parse(&args) {
        Ok(p) => p,
        // Upstream's wording (cmd/kubelet/app/server.go, printed by component-base's cli.Run).
        Err(e @ FlagError::Positional(_)) => {
            eprintln!("Error: {e}");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("Error: failed to parse kubelet flag: {e}");
            std::process::exit(1);
        }
    };
    if parsed.bool("help") == Some(true) {
        print!("{}", usage());
        return Ok(());
    }
    if let Some(v) = parsed
        .last("version")
        .filter(|v| flags::parse_bool(v) != Ok(false))
    {
        if v == "raw" {
            println!(
                "version.Info{{GitVersion:\"{}\", Rkubelet:\"{}\"}}",
                kubelet::node::status::KUBELET_VERSION,
                env!("CARGO_PKG_VERSION")
            );
        } else {
            println!("{}", version_line());
        }
        return Ok(());
    }
    // pflag prints these to stderr as it parses, before logging is set up.
    for n in &parsed.notices {
        eprintln!("{n}");
    }
    let (cfg, warnings) = match effective_config(&parsed) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::exit(1);
        }
    };
    if let Err(e) = logging::init(&cfg.logging) {
        eprintln!("Error: {e:#}");
        std::process::exit(1);
    }
    for w in &warnings {
        warn!("{w}");
    }
    process::apply(cfg.oom_score_adj, cfg.max_open_files);
    kubelet::heap::limit_arenas();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let res = rt.block_on(async move {
        // The path as text ("" when unset), not Option's Debug, in the quoted klog value.
        let static_pods = cfg.static_pod_path.as_deref().map(|p| p.display().to_string());
        info!(node = %cfg.node_name, endpoint = %cfg.container_runtime_endpoint,
            static_pod_path = static_pods.unwrap_or_default(), version = %version_line(), "starting rkubelet");
        let cancel = CancellationToken::new();
        tokio::spawn(handle_signals(cancel.clone()));
        kubelet::kubelet::run(cfg, cancel)
            .await
            .context("rkubelet failed")
    });
    // Dropping the runtime would wait for every blocking thread without a bound.
    rt.shutdown_timeout(RUNTIME_SHUTDOWN);
    // Once logging is up, upstream's cli.Run logs the failure as a klog error line (not a
    // bare "Error: ..." that log parsers would not recognise).
    if let Err(e) = &res {
        error!(err = %error_text(e), "command failed");
    }
    logging::flush();
    std::process::exit(i32::from(res.is_err()));
}

/// The error and its causes on one line, `a: b: c`, leaving out a cause whose text the message
/// before it already holds: many errors here (thiserror's `"...: {0}"` with `#[from]`) print
/// their source themselves, and anyhow's `{:#}` would print it a second time.
fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if out.contains(&msg) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&msg);
    }
    out
}
