use std::sync::{Arc, Mutex};

use tracing::Level;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

use super::format::{self, go_quote, Caller, Fields, Stamp, Val};

fn stamp() -> Stamp {
    // 2020-11-30T22:32:22.123456Z
    let ts = jiff::Timestamp::from_microsecond(1_606_775_542_123_456).unwrap();
    Stamp::new(ts, &jiff::tz::TimeZone::UTC)
}

/// The fields a real tracing event hands the visitor.
fn capture(emit: impl FnOnce()) -> Fields {
    struct Grab(Arc<Mutex<Option<Fields>>>);
    impl<S: tracing::Subscriber> Layer<S> for Grab {
        fn on_event(&self, e: &tracing::Event<'_>, _: Context<'_, S>) {
            let mut f = Fields::default();
            e.record(&mut f);
            *self.0.lock().unwrap() = Some(f);
        }
    }
    let slot = Arc::new(Mutex::new(None));
    let sub = tracing_subscriber::registry().with(Grab(slot.clone()));
    tracing::subscriber::with_default(sub, emit);
    let f = slot.lock().unwrap().take();
    f.expect("an event")
}

#[test]
fn go_quote_table() {
    for (input, want) in [
        ("plain", r#""plain""#),
        (r#"say "hi""#, r#""say \"hi\"""#),
        ("a\\b", r#""a\\b""#),
        ("two\nlines\ttab\r", r#""two\nlines\ttab\r""#),
        ("\x1b[31mred\x1b[0m", r#""\x1b[31mred\x1b[0m""#),
        ("\u{85}", r#""\u0085""#),
        ("grüß 🙂", "\"grüß 🙂\""),
    ] {
        let mut out = String::new();
        go_quote(input, &mut out);
        assert_eq!(out, want, "{input:?}");
    }
}

#[test]
fn field_values_as_klog_types_them() {
    let path = std::path::PathBuf::from("/var/lib/kubelet");
    let e = std::io::Error::other("disk \"full\"");
    let f = capture(|| {
        tracing::info!(
            n = 3,
            neg = -2i64,
            ok = true,
            ratio = 0.5,
            name = "web",
            node = %"node-1",
            dir = ?path,
            opt = ?Some("x"),
            wait = ?std::time::Duration::from_millis(1500),
            shown = %1.25,
            error = %e,
            "pod {} started",
            "default/web"
        )
    });
    assert_eq!(f.message, "pod default/web started");
    assert_eq!(f.err.as_deref(), Some("disk \"full\""));
    let s = |v: &str| Val::Str(v.into());
    let b = |v: &str| Val::Bare(v.into());
    assert_eq!(
        f.kvs,
        vec![
            ("n", b("3")),
            ("neg", b("-2")),
            ("ok", b("true")),
            ("ratio", b("0.5")),
            ("name", s("web")),
            ("node", s("node-1")),
            ("dir", s("/var/lib/kubelet")),
            ("opt", s("Some(\"x\")")),
            ("wait", s("1.5s")),
            ("shown", b("1.25")),
        ]
    );
}

#[test]
fn error_values_carry_their_sources() {
    let inner = std::io::Error::other("connection refused");
    let outer = std::io::Error::other(Wrapper(inner));
    let f = capture(|| tracing::warn!(error = &outer as &dyn std::error::Error, "dial"));
    assert_eq!(f.err.as_deref(), Some("dialing: connection refused"));

    #[derive(Debug)]
    struct Wrapper(std::io::Error);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("dialing")
        }
    }
    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}

#[test]
fn text_line_is_klogs_header_and_infos() {
    let f = Fields {
        message: "Pod status \"updated\"".into(),
        err: Some("boom\nagain".into()),
        kvs: vec![
            ("pod", Val::Str("kube-system/dns".into())),
            ("restarts", Val::Bare("2".into())),
        ],
        ..Fields::default()
    };
    let caller = Caller {
        file: "crates/kubelet/src/status/manager.rs",
        line: 123,
    };
    assert_eq!(
        format::text_line(&Level::WARN, &stamp(), 3077, &caller, &f),
        "W1130 22:32:22.123456    3077 manager.rs:123] \"Pod status \\\"updated\\\"\" \
         err=\"boom\\nagain\" pod=\"kube-system/dns\" restarts=2\n"
    );
    let module = Caller {
        file: "crates/kubelet/src/pod_workers/mod.rs",
        line: 7,
    };
    let line = format::text_line(&Level::DEBUG, &stamp(), 1, &module, &Fields::default());
    assert_eq!(
        line,
        "I1130 22:32:22.123456       1 pod_workers/mod.rs:7] \"\"\n"
    );
    let line = format::text_line(&Level::ERROR, &stamp(), 12345678, &caller, &f);
    assert!(line.starts_with("E1130 22:32:22.123456 12345678 manager.rs:123] "));
}

#[test]
fn json_line_is_component_bases() {
    let f = Fields {
        message: "probe \"failed\"".into(),
        err: Some("timeout".into()),
        kvs: vec![
            ("pod", Val::Str("default/web".into())),
            ("n", Val::Bare("3".into())),
            ("ok", Val::Bare("false".into())),
            ("msg", Val::Str("clash".into())),
            ("pod", Val::Str("dup".into())),
        ],
        ..Fields::default()
    };
    let caller = Caller {
        file: "crates/kubelet/src/prober/worker.rs",
        line: 9,
    };
    let line = format::json_line(&Level::INFO, 4, &stamp(), &caller, &f);
    assert!(line.ends_with("}\n") && !line.trim_end().contains('\n'));
    assert!(
        line.starts_with(r#"{"ts":1606775542123.456,"caller":"prober/worker.rs:9","msg":"probe \"failed\"","v":4,"err":"timeout","pod":"default/web","n":3,"ok":false}"#),
        "{line}"
    );
    let j: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(j["ts"].as_f64(), Some(1_606_775_542_123.456));
    // zapr's Error has no "v".
    let e = format::json_line(&Level::ERROR, 0, &stamp(), &caller, &f);
    let j: serde_json::Value = serde_json::from_str(&e).unwrap();
    assert!(j.get("v").is_none() && j["err"] == "timeout", "{e}");
}

#[test]
fn json_strings_escape_control_characters() {
    let f = Fields {
        message: "\x1b[1mbold\nnext".into(),
        ..Fields::default()
    };
    let caller = Caller {
        file: "main.rs",
        line: 1,
    };
    let line = format::json_line(&Level::INFO, 0, &stamp(), &caller, &f);
    assert!(!line.contains('\x1b'), "{line}");
    let j: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(j["msg"], "\x1b[1mbold\nnext");
    assert_eq!(j["caller"], "main.rs:1");
}

#[test]
fn span_fields_follow_the_events_and_never_repeat_a_key() {
    let mut event = Fields {
        kvs: vec![("container", Val::Str("main".into()))],
        ..Fields::default()
    };
    let span = Fields {
        kvs: vec![
            ("pod", Val::Str("default/web".into())),
            ("container", Val::Str("other".into())),
        ],
        ..Fields::default()
    };
    event.extend_from(&span);
    assert_eq!(
        event.kvs,
        vec![
            ("container", Val::Str("main".into())),
            ("pod", Val::Str("default/web".into())),
        ]
    );
}

#[test]
fn a_field_named_message_does_not_replace_the_message() {
    // `warn!(message = %r.message, "pod rejected")` (sync_loop's admission log).
    let why = "Node didn't have enough resource";
    let f = capture(|| tracing::warn!(reason = "OutOfpods", message = %why, "pod rejected"));
    assert_eq!(f.message, "pod rejected");
    assert_eq!(
        f.kvs,
        vec![
            ("reason", Val::Str("OutOfpods".into())),
            ("message", Val::Str(why.into())),
        ]
    );
}
