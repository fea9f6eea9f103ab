//! The client-side rate limit on the kubelet's API client: `kubeAPIQPS` / `--kube-api-qps` and
//! `kubeAPIBurst` / `--kube-api-burst` (upstream: `kubeClientConfigOverrides` sets the rest
//! config's `QPS`/`Burst`, and client-go's `RESTClientFor` puts a
//! `flowcontrol.NewTokenBucketRateLimiter` in front of every request, watches included).
//!
//! client-go's reading of the two numbers is kept: a QPS of 0 means client-go's default 5, a burst
//! of 0 its default 10, and a negative QPS no limit at all (how upstream builds its heartbeat
//! client). Like client-go, each request waits for its token before it is sent (`Wait`, i.e.
//! `rate.Reserve`): callers queue and get evenly spaced tokens rather than errors.
//!
//! Upstream gives node status and the Lease their own client with the limit off
//! (`heartbeatClientConfig.QPS = float32(-1)`) and events theirs (`eventRecordQPS`, limited by the
//! event recorder here), so the kubelet wiring hands those the unlimited client.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::events::TokenBucket;

/// client-go's `rest.DefaultQPS`, used when the configured QPS is 0.
pub const CLIENT_GO_DEFAULT_QPS: f32 = 5.0;
/// client-go's `rest.DefaultBurst`, used when the configured burst is 0.
pub const CLIENT_GO_DEFAULT_BURST: u32 = 10;

/// The limit client-go applies for a rest config's `QPS` and `Burst`: `None` is no limiter.
pub fn effective_limit(qps: f32, burst: i64) -> Option<(f64, u32)> {
    let qps = if qps == 0.0 {
        CLIENT_GO_DEFAULT_QPS
    } else {
        qps
    };
    if qps <= 0.0 || !qps.is_finite() {
        return None;
    }
    let burst = match burst {
        0 => CLIENT_GO_DEFAULT_BURST,
        b => u32::try_from(b).unwrap_or(0),
    };
    Some((f64::from(qps), burst))
}

/// `client` behind a token bucket of `qps` requests a second and `burst` at once (client-go's
/// semantics for 0 and negative values, see [`effective_limit`]).
pub fn throttled(client: kube::Client, qps: f32, burst: i64) -> kube::Client {
    let Some((qps, burst)) = effective_limit(qps, burst) else {
        return client;
    };
    let ns = client.default_namespace().to_string();
    let start = tokio::time::Instant::now();
    let bucket = Arc::new(Mutex::new(TokenBucket::new(qps, burst, Duration::ZERO)));
    let svc = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
        let wait = {
            let mut b = match bucket.lock() {
                Ok(b) => b,
                Err(poisoned) => poisoned.into_inner(),
            };
            b.reserve(start.elapsed())
        };
        let client = client.clone();
        async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            client.send(req).await
        }
    });
    kube::Client::new(svc, ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Case = (f32, i64, Option<(f64, u32)>, &'static str);

    #[test]
    fn client_go_reading_of_qps_and_burst() {
        let cases: &[Case] = &[
            (50.0, 100, Some((50.0, 100)), "kubelet defaults"),
            (0.0, 0, Some((5.0, 10)), "zero means client-go's defaults"),
            (0.0, 3, Some((5.0, 3)), "zero QPS alone"),
            (2.0, 0, Some((2.0, 10)), "zero burst alone"),
            (
                -1.0,
                100,
                None,
                "negative QPS: no limiter (heartbeat client)",
            ),
            (0.5, 1, Some((0.5, 1)), "fractional QPS"),
        ];
        for (qps, burst, want, why) in cases {
            assert_eq!(effective_limit(*qps, *burst), *want, "{why}");
        }
    }

    /// A client answering every request at once, counting them.
    fn counting() -> (kube::Client, Arc<std::sync::atomic::AtomicUsize>) {
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = n.clone();
        let svc = tower::service_fn(move |_req: hyper::Request<kube::client::Body>| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                Ok::<_, std::convert::Infallible>(hyper::Response::new(kube::client::Body::from(
                    b"{}".to_vec(),
                )))
            }
        });
        (kube::Client::new(svc, "default"), n)
    }

    /// With a paused clock: the burst goes out at once, the rest one per 1/QPS.
    #[tokio::test(start_paused = true)]
    async fn burst_then_paced() {
        let (inner, sent) = counting();
        let client = throttled(inner, 2.0, 3);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..7 {
            let c = client.clone();
            tasks.spawn(async move {
                let req = hyper::Request::get("/api").body(Vec::new()).unwrap();
                c.request_text(req).await.unwrap();
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 3, "burst");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            sent.load(std::sync::atomic::Ordering::SeqCst),
            4,
            "one more after 1/QPS"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            sent.load(std::sync::atomic::Ordering::SeqCst),
            7,
            "all after 2 s"
        );
        while tasks.join_next().await.is_some() {}
    }
}
