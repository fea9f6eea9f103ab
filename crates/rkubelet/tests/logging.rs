//! Logs an operator can ship (issue 15 item 3): a real rkubelet with stderr (and stdout) to
//! files, never a terminal. Default text is klog's header + `InfoS` line and carries no ANSI
//! escape; `logging.format: json` / `--logging-format=json` gives component-base's JSON lines;
//! `-v` and `--vmodule` choose what is printed; `splitStream` sends errors to stderr and the
//! rest (buffered, flushed every `flushFrequency`) to stdout; a bad format stops the start.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::klog;
use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// An rkubelet whose stdout and stderr go to their own files; killed on drop if still running.
struct Kubelet {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Kubelet {
    /// Starts rkubelet for `env` with `extra_config` (YAML lines) and `args`; only flags
    /// upstream does not deprecate, so that pflag prints no notice lines before logging starts.
    fn start(env: &Env, run: &str, extra_config: &str, args: &[&str]) -> Kubelet {
        let config = env.dir.join(format!("{run}.yaml"));
        let cfg = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             staticPodPath: {}\npodLogsDir: {}\nreadOnlyPort: {}\nhealthzPort: {}\nport: {}\n\
             containerRuntimeEndpoint: unix://{}\ncgroupRoot: {}\n\
             fileCheckFrequency: 1s\nsyncFrequency: 1m0s\n\
             evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}}\n\
             imageGCHighThresholdPercent: 100\n{extra_config}",
            env.manifests.display(),
            env.logs.display(),
            env.ro_port,
            env.healthz_port,
            env.port,
            env.sock.display(),
            env.cgroup_root(),
        );
        std::fs::write(&config, cfg).unwrap();
        let out = env.dir.join(format!("{run}.stdout"));
        let err = env.dir.join(format!("{run}.stderr"));
        let child = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
            .arg(format!("--config={}", config.display()))
            .arg(format!("--root-dir={}", env.root.display()))
            .arg(format!("--hostname-override={}", env.node))
            .arg(format!(
                "--container-logs-dir={}",
                env.dir.join("containers").display()
            ))
            .args(args)
            // Whatever the caller's terminal asked for: a file gets no colour regardless.
            .env_remove("NO_COLOR")
            .env_remove("RUST_LOG")
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn rkubelet");
        let k = Kubelet { child, out, err };
        let port = env.healthz_port;
        wait_until(Duration::from_secs(10), "rkubelet healthz", || {
            http_get("127.0.0.1", port, "/healthz")
                .ok()
                .filter(|(c, _)| *c == 200)
        });
        k
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// SIGTERM and wait for a clean exit.
    fn stop(&mut self) {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "rkubelet exited with {st:?}");
                return;
            }
            assert!(Instant::now() < deadline, "rkubelet did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- stderr ---\n{}\n--- stdout ---\n{}",
                tail(&self.stderr(), 40),
                tail(&self.stdout(), 40)
            );
        }
    }
}

fn no_escapes(what: &str, text: &str) {
    assert!(!text.is_empty(), "{what}: nothing logged");
    assert!(
        !text.contains('\x1b'),
        "{what}: ANSI escape in a log written to a file:\n{}",
        tail(text, 20)
    );
}

/// Every line of `text` has klog's header; returns the headers.
fn klog_lines(text: &str) -> Vec<klog::Header<'_>> {
    text.lines()
        .map(|l| klog::header(l).unwrap_or_else(|| panic!("not a klog line: {l:?}")))
        .collect()
}

/// Every line of `text` is a component-base JSON object with ts (ms), caller, msg, and v
/// unless it is an error (zapr's Error has none).
fn json_lines(text: &str, since: SystemTime) -> Vec<Value> {
    let lo = since
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64
        - 1000.0;
    let hi = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64
        + 1000.0;
    text.lines()
        // pflag's notice, printed before logging starts, as upstream (the flag is deprecated
        // in favour of the config file; -v and --vmodule are not).
        .filter(|l| !l.starts_with("Flag --logging-format has been deprecated, "))
        .map(|l| {
            let j: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}"));
            let ts = j["ts"].as_f64().unwrap_or_else(|| panic!("no ts: {l}"));
            assert!(
                (lo..hi).contains(&ts),
                "ts {ts} is not ms since the epoch: {l}"
            );
            let caller = j["caller"]
                .as_str()
                .unwrap_or_else(|| panic!("no caller: {l}"));
            let (file, line) = caller.rsplit_once(':').unwrap();
            assert!(file.ends_with(".rs") && line.parse::<u32>().is_ok(), "{l}");
            assert!(j["msg"].is_string(), "no msg: {l}");
            assert!(j["v"].is_u64() || j.get("err").is_some(), "no v: {l}");
            j
        })
        .collect()
}

#[tokio::test]
async fn text_is_klogs_format_without_colour_and_v_chooses_what_is_printed() {
    let env = Env::new(218);
    env.write_manifest("sleep.yaml", &simple_pod("sleep", "Always", SLEEPER));

    // -v=0: klog lines only, no debug (V(4)) messages.
    let mut quiet = Kubelet::start(&env, "v0", "", &["--v=0"]);
    env.wait_running("sleep");
    std::thread::sleep(Duration::from_secs(3));
    quiet.stop();
    let text = quiet.stderr();
    no_escapes("-v=0", &text);
    let headers = klog_lines(&text);
    let pid = quiet.child.id();
    assert!(headers.iter().all(|h| h.pid == pid), "the pid column");
    let start = text
        .lines()
        .find(|l| l.contains(r#"] "starting rkubelet" node="node-218""#))
        .unwrap_or_else(|| panic!("{}", tail(&text, 20)));
    let h = klog::header(start).unwrap();
    assert_eq!(h.severity, 'I');
    assert!(h.source.starts_with("main.rs:"), "{start}");
    let when = klog::time_of(start).unwrap();
    let age = SystemTime::now().duration_since(when).unwrap_or_default();
    assert!(
        age < Duration::from_secs(120),
        "header time is local now: {start}"
    );
    assert!(!text.contains("PLEG relist"), "{}", tail(&text, 20));
    assert!(quiet.stdout().is_empty(), "everything goes to stderr");

    // -v=4: the same lines plus the V(4) ones (PLEG relists every second).
    let mut verbose = Kubelet::start(&env, "v4", "", &["-v", "4"]);
    env.wait_running("sleep");
    std::thread::sleep(Duration::from_secs(3));
    verbose.stop();
    let text = verbose.stderr();
    no_escapes("-v=4", &text);
    let relists: Vec<_> = text
        .lines()
        .filter(|l| l.contains(r#"] "PLEG relist" elapsed="#))
        .collect();
    assert!(relists.len() >= 2, "{}", tail(&text, 20));
    for l in &relists {
        assert!(
            klog::header(l).unwrap().source.starts_with("pleg/mod.rs:"),
            "{l}"
        );
    }
    let v4_lines = klog_lines(&text).len();
    assert!(v4_lines > headers.len(), "-v=4 prints more than -v=0");
    // A figure, not asserted: how much -v=4 adds over the same few seconds.
    eprintln!(
        "lines over a ~5 s run: -v=0 {}, -v=4 {v4_lines} ({} PLEG relists)",
        headers.len(),
        relists.len()
    );
}

#[tokio::test]
async fn json_lines_with_v_levels_and_vmodule_from_file_and_flags() {
    let env = Env::new(219);
    env.write_manifest("sleep.yaml", &simple_pod("sleep", "Always", SLEEPER));

    // From the config file, -v=4.
    let since = SystemTime::now();
    let mut k = Kubelet::start(&env, "json", "logging: {format: json}\n", &["--v=4"]);
    env.wait_running("sleep");
    std::thread::sleep(Duration::from_secs(3));
    k.stop();
    let text = k.stderr();
    no_escapes("json", &text);
    let lines = json_lines(&text, since);
    let start = lines
        .iter()
        .find(|j| j["msg"] == "starting rkubelet")
        .unwrap_or_else(|| panic!("{}", tail(&text, 20)));
    assert_eq!(start["v"], 0);
    assert_eq!(start["node"], "node-219");
    assert!(
        start["caller"]
            .as_str()
            .unwrap()
            .starts_with("src/main.rs:"),
        "zap's short caller: {start}"
    );
    let v4: Vec<&Value> = lines.iter().filter(|j| j["v"] == 4).collect();
    assert!(
        v4.iter().any(|j| j["msg"] == "PLEG relist"),
        "{}",
        tail(&text, 20)
    );
    assert!(
        v4.iter().any(|j| j["msg"] == "pod cgroup created"),
        "V(4) lines of other modules too: {}",
        tail(&text, 40)
    );

    // From the flag, -v=0 with --vmodule=pleg=4: only pleg/mod.rs (a mod.rs goes by its
    // directory's name) prints beyond V(0).
    let since = SystemTime::now();
    let mut k = Kubelet::start(
        &env,
        "vmodule",
        "",
        &["--logging-format=json", "--v=0", "--vmodule=pleg=4"],
    );
    env.wait_running("sleep");
    std::thread::sleep(Duration::from_secs(3));
    k.stop();
    let text = k.stderr();
    let lines = json_lines(&text, since);
    let above: Vec<&Value> = lines
        .iter()
        .filter(|j| j["v"].as_u64().is_some_and(|v| v > 0))
        .collect();
    assert!(
        above.iter().any(|j| j["msg"] == "PLEG relist"),
        "{}",
        tail(&text, 20)
    );
    for j in &above {
        assert!(
            j["caller"].as_str().unwrap().contains("pleg/mod.rs:"),
            "only pleg/mod.rs is at V(4): {j}"
        );
    }
}

#[test]
fn split_stream_sends_errors_to_stderr_and_buffers_the_rest_on_stdout() {
    let env = Env::new(220);
    // A broken manifest: an error line ("invalid static pod manifest").
    env.write_manifest(
        "broken.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x\n",
    );
    let mut k = Kubelet::start(
        &env,
        "split",
        "logging:\n  flushFrequency: 1s\n  options:\n    text:\n      splitStream: true\n      infoBufferSize: 1Mi\n",
        &[],
    );
    wait_until(Duration::from_secs(15), "error line on stderr", || {
        k.stderr()
            .contains("invalid static pod manifest")
            .then_some(())
    });
    // 1 MiB is never filled here: the info lines reach stdout through the 1 s flush.
    wait_until(
        Duration::from_secs(10),
        "info lines flushed to stdout",
        || k.stdout().contains(r#""starting rkubelet""#).then_some(()),
    );
    k.stop();
    let (out, err) = (k.stdout(), k.stderr());
    no_escapes("stdout", &out);
    no_escapes("stderr", &err);
    assert!(klog_lines(&err).iter().all(|h| h.severity == 'E'), "{err}");
    assert!(klog_lines(&out).iter().all(|h| h.severity != 'E'), "{out}");
    // What was still buffered at SIGTERM was written on the way out.
    assert!(
        out.contains("rkubelet stopped; pods keep running"),
        "{}",
        tail(&out, 5)
    );
}

/// What rkubelet prints and returns for a command line that fails to start.
fn failed_start(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_logging_settings_are_start_errors_naming_the_flag_or_field() {
    let err = failed_start(&["--logging-format=xml"]);
    assert!(
        err.contains(r#"logging.format (--logging-format): "xml" must be one of text, json"#),
        "{err}"
    );
    let err = failed_start(&["--vmodule=pleg"]);
    assert!(
        err.contains(r#"--vmodule: "pleg": expected pattern=N"#),
        "{err}"
    );
    let dir = std::env::temp_dir().join(format!("rkt-logging-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.yaml");
    std::fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         logging:\n  vmodule: [{filePattern: pleg}]\n",
    )
    .unwrap();
    let err = failed_start(&[&format!("--config={}", file.display())]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        err.contains("logging.vmodule: [0].verbosity: must be an integer >= 0"),
        "{err}"
    );
}
