//! Unit tests of parsing, options and the file reader on sample CRI log text.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus,
};
use k8s_openapi::jiff::Timestamp;

use super::format::*;
use super::reader::{log_container_id, read_logs_with};
use super::termination;
use super::LogsError;

const SAMPLE: &str = "\
2024-01-01T00:00:01.5Z stdout F one
2024-01-01T00:00:02Z stderr F two
2024-01-01T00:00:03.123456789Z stdout P thr
2024-01-01T00:00:03.2Z stdout F ee
2024-01-01T00:00:04+02:00 stdout F four
2024-01-01T00:00:05Z stdout F five
";

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[test]
fn parse_lines() {
    let m = parse_cri_line(b"2016-10-06T00:17:09.669794202Z stdout P log content 1\n").unwrap();
    assert_eq!(m.stream, Stream::Stdout);
    assert!(m.partial);
    assert_eq!(m.log, b"log content 1");
    assert_eq!(m.timestamp, ts("2016-10-06T00:17:09.669794202Z"));
    let m = parse_cri_line(b"2016-10-06T00:17:09.669794203Z stderr F log content 2\n").unwrap();
    assert_eq!(m.stream, Stream::Stderr);
    assert!(!m.partial);
    assert_eq!(m.log, b"log content 2\n");
    // Tags may carry more after ':'; an empty message is fine.
    let m = parse_cri_line(b"2016-10-06T00:17:09Z stdout F:x \n").unwrap();
    assert_eq!(m.log, b"\n");

    assert_eq!(parse_cri_line(b"nospace"), Err(ParseError::NoTimestamp));
    assert!(matches!(
        parse_cri_line(b"yesterday stdout F x"),
        Err(ParseError::BadTimestamp(_))
    ));
    assert_eq!(
        parse_cri_line(b"2016-10-06T00:17:09Z stdout"),
        Err(ParseError::NoStream)
    );
    assert_eq!(
        parse_cri_line(b"2016-10-06T00:17:09Z stdin F x"),
        Err(ParseError::BadStream("stdin".into()))
    );
    assert_eq!(
        parse_cri_line(b"2016-10-06T00:17:09Z stdout F"),
        Err(ParseError::NoTag)
    );
}

#[test]
fn fixed_timestamps() {
    let f = |line: &str| fixed_time(&parse_cri_line(line.as_bytes()).unwrap());
    assert_eq!(
        f("2024-01-01T00:00:01.5Z stdout F x"),
        "2024-01-01T00:00:01.500000000Z"
    );
    assert_eq!(
        f("2024-01-01T00:00:01Z stdout F x"),
        "2024-01-01T00:00:01.000000000Z"
    );
    assert_eq!(
        f("2024-01-01T00:00:01.123456789Z stdout F x"),
        "2024-01-01T00:00:01.123456789Z"
    );
    assert_eq!(
        f("2024-01-01T00:00:01.25+02:00 stdout F x"),
        "2024-01-01T00:00:01.250000000+02:00"
    );
}

#[test]
fn options_from_query() {
    let now = ts("2024-01-01T00:01:00Z");
    let o = LogOptions::from_pod_options(&PodLogOptions::default(), now);
    assert_eq!(o, LogOptions::default());
    let o = LogOptions::from_pod_options(
        &PodLogOptions {
            since_seconds: Some(30),
            since_time: Some(ts("2024-01-01T00:00:10Z")),
            tail_lines: Some(5),
            limit_bytes: Some(100),
            follow: true,
            timestamps: true,
            ..Default::default()
        },
        now,
    );
    // The later of the two wins.
    assert_eq!(o.since, Some(ts("2024-01-01T00:00:30Z")));
    assert_eq!(
        (o.tail, o.limit_bytes, o.follow, o.timestamps),
        (Some(5), Some(100), true, true)
    );
    let o = LogOptions::from_pod_options(
        &PodLogOptions {
            since_seconds: Some(100),
            since_time: Some(ts("2024-01-01T00:00:50Z")),
            tail_lines: Some(-1),
            ..Default::default()
        },
        now,
    );
    assert_eq!(o.since, Some(ts("2024-01-01T00:00:50Z")));
    assert_eq!(o.tail, None);
}

#[test]
fn writer_limits_and_since() {
    let mut w = LogWriter::new(&LogOptions {
        limit_bytes: Some(6),
        since: Some(ts("2024-01-01T00:00:02Z")),
        ..Default::default()
    });
    let old = parse_cri_line(b"2024-01-01T00:00:01Z stdout F old\n").unwrap();
    let a = parse_cri_line(b"2024-01-01T00:00:02Z stdout F abcd\n").unwrap();
    let b = parse_cri_line(b"2024-01-01T00:00:03Z stdout F efgh\n").unwrap();
    assert_eq!(w.render(&old), Render::Skip);
    assert_eq!(
        w.render(&a),
        Render::Write {
            bytes: b"abcd\n".to_vec(),
            done: false
        }
    );
    assert_eq!(
        w.render(&b),
        Render::Write {
            bytes: b"e".to_vec(),
            done: true
        }
    );
}

async fn read(text: &str, opts: LogOptions) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("0.log");
    std::fs::write(&p, text).unwrap();
    let mut out = Vec::new();
    read_logs_with(&p, &opts, || async { Ok(false) }, &mut out)
        .await
        .unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn read_all_joins_partial_lines() {
    assert_eq!(
        read(SAMPLE, LogOptions::default()).await,
        "one\ntwo\nthree\nfour\nfive\n"
    );
}

#[tokio::test]
async fn read_tail() {
    let tail = |n| LogOptions {
        tail: Some(n),
        ..Default::default()
    };
    assert_eq!(read(SAMPLE, tail(2)).await, "four\nfive\n");
    assert_eq!(read(SAMPLE, tail(0)).await, "");
    // Upstream counts file lines: the partial record is a line of its own.
    assert_eq!(read(SAMPLE, tail(3)).await, "ee\nfour\nfive\n");
    assert_eq!(
        read(SAMPLE, tail(100)).await,
        "one\ntwo\nthree\nfour\nfive\n"
    );
}

#[tokio::test]
async fn read_since_limit_timestamps() {
    let since = LogOptions {
        since: Some(ts("2024-01-01T00:00:02Z")),
        ..Default::default()
    };
    assert_eq!(read(SAMPLE, since).await, "two\nthree\nfive\n");
    let limit = LogOptions {
        limit_bytes: Some(10),
        ..Default::default()
    };
    assert_eq!(read(SAMPLE, limit).await, "one\ntwo\nth");
    let stamps = LogOptions {
        timestamps: true,
        tail: Some(2),
        ..Default::default()
    };
    assert_eq!(
        read(SAMPLE, stamps).await,
        "2024-01-01T00:00:04.000000000+02:00 four\n\
         2024-01-01T00:00:05.000000000Z five\n"
    );
}

#[tokio::test]
async fn read_skips_garbage_and_keeps_unterminated_last_line() {
    let text = "garbage\n2024-01-01T00:00:01Z stdout F a\n2024-01-01T00:00:02Z stdout F b";
    assert_eq!(read(text, LogOptions::default()).await, "a\nb");
}

#[tokio::test]
async fn missing_file_is_an_io_error() {
    let mut out = Vec::new();
    let err = read_logs_with(
        Path::new("/nonexistent/0.log"),
        &LogOptions::default(),
        || async { Ok(false) },
        &mut out,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, LogsError::Io { .. }), "{err}");
}

fn append(p: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(p)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// Follow sees lines written later, survives a rotation (rename + new file) without losing the
/// lines written to the old file, and ends once the container stops.
#[tokio::test]
async fn follow_across_rotation_until_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("0.log");
    append(&p, "2024-01-01T00:00:01Z stdout F first\n");
    let running = Arc::new(AtomicBool::new(true));
    let r = running.clone();
    let p2 = p.clone();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        append(&p2, "2024-01-01T00:00:02Z stdout F second\n");
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Rotation: rename, the runtime still writes to the old file, then reopens.
        let rotated = p2.with_extension("log.20240101-000003");
        std::fs::rename(&p2, &rotated).unwrap();
        append(&rotated, "2024-01-01T00:00:03Z stdout F third\n");
        tokio::time::sleep(Duration::from_millis(200)).await;
        append(&p2, "2024-01-01T00:00:04Z stdout F fourth\n");
        tokio::time::sleep(Duration::from_millis(200)).await;
        append(&p2, "2024-01-01T00:00:05Z stdout F fifth\n");
        r.store(false, Ordering::SeqCst);
    });
    let opts = LogOptions {
        follow: true,
        ..Default::default()
    };
    let mut out = Vec::new();
    let check = running.clone();
    tokio::time::timeout(
        Duration::from_secs(10),
        read_logs_with(
            &p,
            &opts,
            move || {
                let c = check.clone();
                async move { Ok(c.load(Ordering::SeqCst)) }
            },
            &mut out,
        ),
    )
    .await
    .expect("follow ends when the container stops")
    .unwrap();
    writer.await.unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "first\nsecond\nthird\nfourth\nfifth\n"
    );
}

#[tokio::test]
async fn follow_with_tail_starts_at_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("0.log");
    std::fs::write(&p, SAMPLE).unwrap();
    let opts = LogOptions {
        follow: true,
        tail: Some(1),
        ..Default::default()
    };
    let mut out = Vec::new();
    read_logs_with(&p, &opts, || async { Ok(false) }, &mut out)
        .await
        .unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "five\n");
}

#[tokio::test]
async fn termination_message_from_log_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("0.log");
    let mut text = String::new();
    for i in 0..100 {
        text.push_str(&format!("2024-01-01T00:00:01Z stdout F line {i}\n"));
    }
    std::fs::write(&p, &text).unwrap();
    let msg = termination::last_log_string(&p).await;
    // 80 lines of about 8 bytes fit in 2 KiB: exactly the last 80.
    assert!(msg.starts_with("line 20\n"), "{msg}");
    assert!(msg.ends_with("line 99\n"));
    let long = "x".repeat(100);
    let mut text = String::new();
    for _ in 0..80 {
        text.push_str(&format!("2024-01-01T00:00:01Z stdout F {long}\n"));
    }
    std::fs::write(&p, &text).unwrap();
    assert_eq!(termination::last_log_string(&p).await.len(), 2048);
    assert!(termination::last_log_string(Path::new("/nonexistent"))
        .await
        .starts_with("Error on reading termination message from logs"));
}

#[test]
fn termination_message_helpers() {
    assert_eq!(termination::append("", "bye"), "bye");
    assert_eq!(termination::append("OOM", "bye"), "OOM: bye");
    assert_eq!(termination::append("OOM", ""), "OOM");
    let mut s = "héllo".to_string();
    termination::truncate(&mut s, 2);
    assert_eq!(s, "h");
}

fn status(state: ContainerState, last: Option<ContainerState>) -> ContainerStatus {
    ContainerStatus {
        name: "c".into(),
        container_id: Some("containerd://cur".into()),
        state: Some(state),
        last_state: last,
        ..Default::default()
    }
}

fn terminated(id: &str) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            container_id: (!id.is_empty()).then(|| format!("containerd://{id}")),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn which_instance_kubectl_logs_reads() {
    let running = ContainerState {
        running: Some(ContainerStateRunning::default()),
        ..Default::default()
    };
    let waiting = |r: &str| ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(r.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = |s: &ContainerStatus, prev| log_container_id("p", s, prev).map_err(|e| e.to_string());
    let s = status(running.clone(), Some(terminated("old")));
    assert_eq!(id(&s, false), Ok("cur".into()));
    assert_eq!(id(&s, true), Ok("old".into()));
    let s = status(running, None);
    assert_eq!(
        id(&s, true),
        Err("previous terminated container \"c\" in pod \"p\" not found".into())
    );
    // Crash looping: the dead instance is both current and previous.
    let s = status(waiting("CrashLoopBackOff"), Some(terminated("dead")));
    assert_eq!(id(&s, false), Ok("dead".into()));
    assert_eq!(id(&s, true), Ok("dead".into()));
    let s = status(terminated("done"), Some(terminated("before")));
    assert_eq!(id(&s, false), Ok("done".into()));
    assert_eq!(id(&s, true), Ok("before".into()));
    let s = status(waiting("ErrImagePull"), None);
    assert_eq!(
        id(&s, false),
        Err("container \"c\" in pod \"p\" is waiting to start: image can't be pulled".into())
    );
    let s = status(ContainerState::default(), None);
    assert!(id(&s, false).unwrap_err().contains("no logs yet"));
}

#[tokio::test]
async fn clean_known_removes_live_rotated_and_symlink_only() {
    use super::symlink::{clean_known, symlink_path, ContainerLog};
    let dir = tempfile::tempdir().unwrap();
    let pod_logs = dir.path().join("pod");
    let links = dir.path().join("containers");
    std::fs::create_dir_all(pod_logs.join("main")).unwrap();
    std::fs::create_dir_all(&links).unwrap();
    let live = pod_logs.join("main/0.log");
    for f in [
        "0.log",
        "0.log.20240101-000000.gz",
        "0.log.20240101-000010",
        "1.log",
    ] {
        std::fs::write(pod_logs.join("main").join(f), "x").unwrap();
    }
    let log = ContainerLog {
        id: "abc".into(),
        log_path: live.to_string_lossy().into_owned(),
        pod_name: "p".into(),
        pod_namespace: "ns".into(),
        container_name: "main".into(),
    };
    let link = symlink_path(&links, "p", "ns", "main", "abc");
    std::os::unix::fs::symlink(&live, &link).unwrap();
    let other = symlink_path(&links, "p", "ns", "main", "def");
    std::os::unix::fs::symlink(&live, &other).unwrap();

    clean_known(&links, &log).await.unwrap();
    let left: Vec<String> = std::fs::read_dir(pod_logs.join("main"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    // Another instance's log (1.log) and another container's symlink stay.
    assert_eq!(left, vec!["1.log".to_string()]);
    assert!(std::fs::symlink_metadata(&link).is_err());
    assert!(std::fs::symlink_metadata(&other).is_ok());
    // Again: nothing left to remove is no error.
    clean_known(&links, &log).await.unwrap();
}
