//! gRPC servers on unix sockets for Go clients (the device plugin registration and pod-resources
//! servers). grpc-go before 1.52, which upstream's own plugins vendor (the 1.20 sample device
//! plugin: 1.27), sends the socket path as the HTTP/2 `:authority`; h2, under tonic's server,
//! rejects that as a malformed authority (RST_STREAM PROTOCOL_ERROR, hyperium/h2#487). Each
//! accepted connection therefore passes through [`localhost_authority`]: the client's header
//! blocks are decoded and re-encoded with `:authority: localhost` (what newer gRPC clients send
//! on unix sockets); every other frame, and everything the server sends, is copied unchanged.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::{UnixListener, UnixStream};
use tracing::debug;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// HTTP/2's default SETTINGS_MAX_FRAME_SIZE, which h2 keeps.
const MAX_FRAME: usize = 16_384;

/// The accepted connections of `listener`, each behind [`localhost_authority`], for tonic's
/// `serve_with_incoming`.
pub fn incoming(
    listener: UnixListener,
) -> impl futures::Stream<Item = std::io::Result<DuplexStream>> {
    futures::stream::unfold(listener, |l| async move {
        let conn = l.accept().await.map(|(s, _)| localhost_authority(s));
        Some((conn, l))
    })
}

/// The server's end of `client`, with the client's `:authority` made `localhost` when it is not
/// a valid authority. The two copying tasks end with the connection.
pub fn localhost_authority(client: UnixStream) -> DuplexStream {
    let (ours, server) = tokio::io::duplex(64 * 1024);
    let (mut cr, mut cw) = client.into_split();
    let (mut or, mut ow) = tokio::io::split(ours);
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut or, &mut cw).await;
        let _ = cw.shutdown().await;
    });
    tokio::spawn(async move {
        if let Err(e) = rewrite(&mut cr, &mut ow).await {
            debug!(error = %e, "unix socket gRPC connection ended");
        }
        let _ = ow.shutdown().await;
    });
    server
}

fn bad(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.into())
}

/// A header block being collected over HEADERS + CONTINUATION frames.
struct Pending {
    flags: u8,
    stream: [u8; 4],
    priority: Vec<u8>,
    block: Vec<u8>,
}

async fn rewrite(
    r: &mut (impl AsyncRead + Unpin),
    w: &mut (impl AsyncWrite + Unpin),
) -> std::io::Result<()> {
    let mut preface = [0u8; 24];
    r.read_exact(&mut preface).await?;
    w.write_all(&preface).await?;
    if preface != PREFACE {
        // Not HTTP/2 with prior knowledge: let the server answer it.
        return tokio::io::copy(r, w).await.map(|_| ());
    }
    let mut decoder = loona_hpack::Decoder::new();
    let mut encoder = loona_hpack::Encoder::new();
    let mut pending: Option<Pending> = None;
    loop {
        let mut head = [0u8; 9];
        r.read_exact(&mut head).await?;
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream: [u8; 4] = [head[5], head[6], head[7], head[8]];
        let mut payload = vec![0u8; len];
        r.read_exact(&mut payload).await?;
        match kind {
            HEADERS => {
                let mut body = &payload[..];
                let mut pad = 0;
                if flags & PADDED != 0 {
                    pad = usize::from(
                        *body
                            .first()
                            .ok_or_else(|| bad("HEADERS without pad length"))?,
                    );
                    body = &body[1..];
                }
                let mut priority = Vec::new();
                if flags & PRIORITY != 0 {
                    if body.len() < 5 {
                        return Err(bad("HEADERS priority too short"));
                    }
                    priority = body[..5].to_vec();
                    body = &body[5..];
                }
                if pad > body.len() {
                    return Err(bad("HEADERS padding longer than the frame"));
                }
                let block = body[..body.len() - pad].to_vec();
                pending = Some(Pending {
                    flags,
                    stream,
                    priority,
                    block,
                });
            }
            CONTINUATION => match pending.as_mut() {
                Some(p) => p.block.extend_from_slice(&payload),
                None => return Err(bad("CONTINUATION without HEADERS")),
            },
            _ => {
                w.write_all(&head).await?;
                w.write_all(&payload).await?;
                continue;
            }
        }
        if flags & END_HEADERS == 0 {
            continue;
        }
        let Some(Pending {
            flags: hflags,
            stream,
            priority,
            block,
        }) = pending.take()
        else {
            continue;
        };
        let fields = decoder
            .decode(&block)
            .map_err(|e| bad(format!("HPACK: {e:?}")))?;
        let fields: Vec<(Vec<u8>, Vec<u8>)> = fields
            .into_iter()
            .map(|(n, v)| {
                if n == b":authority" && v.contains(&b'/') {
                    (n, b"localhost".to_vec())
                } else {
                    (n, v)
                }
            })
            .collect();
        let block = encoder.encode(fields.iter().map(|(n, v)| (&n[..], &v[..])));
        let mut first = priority;
        let room = MAX_FRAME - first.len();
        let (now, mut rest) = block.split_at(block.len().min(room));
        first.extend_from_slice(now);
        let keep = hflags & !(PADDED | END_HEADERS);
        let mut out_flags = keep | if rest.is_empty() { END_HEADERS } else { 0 };
        write_frame(w, HEADERS, out_flags, stream, &first).await?;
        while !rest.is_empty() {
            let (now, more) = rest.split_at(rest.len().min(MAX_FRAME));
            out_flags = if more.is_empty() { END_HEADERS } else { 0 };
            write_frame(w, CONTINUATION, out_flags, stream, now).await?;
            rest = more;
        }
    }
}

async fn write_frame(
    w: &mut (impl AsyncWrite + Unpin),
    kind: u8,
    flags: u8,
    stream: [u8; 4],
    payload: &[u8],
) -> std::io::Result<()> {
    let len = payload.len();
    let head = [
        (len >> 16) as u8,
        (len >> 8) as u8,
        len as u8,
        kind,
        flags,
        stream[0],
        stream[1],
        stream[2],
        stream[3],
    ];
    w.write_all(&head).await?;
    w.write_all(payload).await
}
