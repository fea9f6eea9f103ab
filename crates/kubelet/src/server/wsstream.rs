//! Log streams over websockets (upstream `k8s.io/apiserver/pkg/util/wsstream` `Reader` with
//! `NewDefaultReaderProtocols`): the log's bytes as binary messages (`binary.k8s.io`, or no
//! subprotocol) or as base64 text messages (`base64.binary.k8s.io`), one per read; a close
//! message when the log ends. What web consoles and client libraries ask `pods/log` for.
//!
//! Only the server's half of RFC 6455 that a one-way stream needs is written here: the handshake
//! and unmasked frames out; frames from the client are read only to notice that it went away.

use base64::Engine;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Upstream's reader protocols, in its order of preference; `true` means base64 text messages.
pub const PROTOCOLS: &[(&str, bool)] = &[("binary.k8s.io", false), ("base64.binary.k8s.io", true)];

/// The RFC 6455 handshake GUID.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandshakeError {
    #[error("websocket: missing Sec-WebSocket-Key")]
    MissingKey,
    /// Upstream `handshake`'s message for a client offering only unknown subprotocols.
    #[error("requested protocol(s) are not supported: {offered:?}; supports {supported:?}")]
    Unsupported {
        offered: Vec<String>,
        supported: Vec<String>,
    },
}

/// `Sec-WebSocket-Accept` for the client's key: base64(SHA-1(key + GUID)).
pub fn accept_key(key: &str) -> String {
    let d = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{}{GUID}", key.trim()).as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(d.as_ref())
}

/// Upstream `handshake`: no subprotocol offered means plain binary; otherwise the first offered
/// one supported (comma-separated, possibly over several headers), or an error naming both sides.
/// Returns the subprotocol to echo ("" for none) and whether messages are base64 text.
pub fn negotiate<'a>(
    offered: impl IntoIterator<Item = &'a str>,
) -> Result<(&'static str, bool), HandshakeError> {
    let offered: Vec<String> = offered
        .into_iter()
        .flat_map(|h| h.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    if offered.is_empty() {
        return Ok(("", false));
    }
    for o in &offered {
        if let Some((p, b64)) = PROTOCOLS.iter().find(|(p, _)| p == o) {
            return Ok((p, *b64));
        }
    }
    Err(HandshakeError::Unsupported {
        offered,
        supported: PROTOCOLS.iter().map(|(p, _)| p.to_string()).collect(),
    })
}

const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;

/// One unmasked, final frame (a server never masks).
pub fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | opcode);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= u16::MAX as usize => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

/// Upstream `Reader.Copy`: every read of `src` becomes one message until it ends, then a normal
/// close. Stops early when the client closes or drops the connection.
pub async fn copy<R, C>(mut src: R, conn: C, base64: bool) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    C: AsyncRead + AsyncWrite + Unpin,
{
    let (mut rd, mut wr) = tokio::io::split(conn);
    let client_gone = async move {
        let mut buf = [0u8; 512];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                // A close frame (FIN + opcode 8) from the client ends the stream.
                Ok(n) if n > 0 && buf[0] & 0x0f == OP_CLOSE => return,
                Ok(_) => {}
            }
        }
    };
    tokio::pin!(client_gone);
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = tokio::select! {
            _ = &mut client_gone => return Ok(()),
            n = src.read(&mut buf) => n?,
        };
        if n == 0 {
            break;
        }
        let msg = if base64 {
            let text = base64::engine::general_purpose::STANDARD.encode(&buf[..n]);
            frame(OP_TEXT, text.as_bytes())
        } else {
            frame(OP_BINARY, &buf[..n])
        };
        wr.write_all(&msg).await?;
        wr.flush().await?;
    }
    // 1000: normal closure.
    wr.write_all(&frame(OP_CLOSE, &1000u16.to_be_bytes()))
        .await?;
    wr.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_as_rfc6455() {
        // The example of RFC 6455 section 1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn negotiation_as_upstream_handshake() {
        assert_eq!(negotiate([]), Ok(("", false)));
        assert_eq!(negotiate(["binary.k8s.io"]), Ok(("binary.k8s.io", false)));
        assert_eq!(
            negotiate(["v4.channel.k8s.io, base64.binary.k8s.io"]),
            Ok(("base64.binary.k8s.io", true))
        );
        assert_eq!(
            negotiate(["base64.binary.k8s.io", "binary.k8s.io"]),
            Ok(("base64.binary.k8s.io", true))
        );
        assert!(matches!(
            negotiate(["channel.k8s.io"]),
            Err(HandshakeError::Unsupported { .. })
        ));
    }

    #[test]
    fn frame_lengths() {
        assert_eq!(frame(OP_TEXT, b"hi"), vec![0x81, 2, b'h', b'i']);
        let f = frame(OP_BINARY, &[0; 200]);
        assert_eq!(&f[..4], &[0x82, 126, 0, 200]);
        let f = frame(OP_BINARY, &[0; 70_000]);
        assert_eq!(&f[..2], &[0x82, 127]);
        assert_eq!(f.len(), 70_000 + 10);
    }

    #[tokio::test]
    async fn copy_sends_messages_then_close() {
        let (server, mut client) = tokio::io::duplex(1 << 16);
        let src: &[u8] = b"line 1\n";
        copy(src, server, true).await.unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        let mut want = frame(OP_TEXT, b"bGluZSAxCg==");
        want.extend(frame(OP_CLOSE, &[0x03, 0xe8]));
        assert_eq!(got, want);
    }
}
