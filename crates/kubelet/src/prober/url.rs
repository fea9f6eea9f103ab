//! Request URLs of the httpGet probe and Go's reference resolution for redirects (upstream
//! relies on `net/url`: `URL.Parse(location)` relative to the current request, `EscapedPath`).

use super::probe::join_host_port;

/// A request URL: scheme, host (IPv6 without brackets), explicit port if any, and the
/// origin-form path with query (always starting with `/`, already percent-escaped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeUrl {
    pub scheme: String,
    pub host: String,
    pub port: Option<u16>,
    pub path: String,
}

impl ProbeUrl {
    /// `host[:port]` as written in the URL; also the default `Host` header.
    pub fn authority(&self) -> String {
        match self.port {
            Some(p) => join_host_port(&self.host, p),
            None if self.host.contains(':') => format!("[{}]", self.host),
            None => self.host.clone(),
        }
    }

    /// The port to connect to: explicit, else the scheme's default.
    pub fn dial_port(&self) -> u16 {
        self.port
            .unwrap_or(if self.scheme == "https" { 443 } else { 80 })
    }

    /// Parses an absolute `scheme://authority/path?query` (fragment already removed).
    fn parse_absolute(s: &str) -> Result<ProbeUrl, String> {
        let uri: hyper::Uri = s.parse().map_err(|e| format!("{e}"))?;
        let scheme = uri.scheme_str().unwrap_or_default().to_ascii_lowercase();
        let authority = uri.authority().ok_or_else(|| "missing host".to_string())?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let path = match uri.path_and_query() {
            Some(pq) if pq.as_str().starts_with('/') => pq.as_str().to_string(),
            Some(pq) => format!("/{}", pq.as_str()),
            None => "/".to_string(),
        };
        Ok(ProbeUrl {
            scheme,
            host,
            port: authority.port_u16(),
            path,
        })
    }

    /// Go's `URL.Parse(location)` relative to this URL (RFC 3986 reference resolution). Returns
    /// the target and whether `location` was absolute (had a scheme).
    pub fn resolve(&self, location: &str) -> Result<(ProbeUrl, bool), String> {
        let location = escape_uri(location.split('#').next().unwrap_or_default());
        if has_scheme(&location) {
            let mut u = Self::parse_absolute(&location)?;
            u.path = normalize(&u.path);
            return Ok((u, true));
        }
        if location.starts_with("//") {
            let mut u = Self::parse_absolute(&format!("{}:{location}", self.scheme))?;
            u.path = normalize(&u.path);
            return Ok((u, false));
        }
        let (base_path, base_query) = split_query(&self.path);
        let (ref_path, ref_query) = split_query(&location);
        let path = if ref_path.is_empty() {
            base_path.to_string()
        } else if ref_path.starts_with('/') {
            ref_path.to_string()
        } else {
            let dir = &base_path[..base_path.rfind('/').map(|i| i + 1).unwrap_or(0)];
            format!("{dir}{ref_path}")
        };
        let query = if ref_path.is_empty() && ref_query.is_none() {
            base_query
        } else {
            ref_query
        };
        let mut path = normalize(&path);
        if let Some(q) = query {
            path.push('?');
            path.push_str(q);
        }
        Ok((
            ProbeUrl {
                path,
                ..self.clone()
            },
            false,
        ))
    }
}

impl std::fmt::Display for ProbeUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority(), self.path)
    }
}

fn has_scheme(s: &str) -> bool {
    let Some(colon) = s.find(':') else {
        return false;
    };
    let scheme = &s[..colon];
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn split_query(s: &str) -> (&str, Option<&str>) {
    match s.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (s, None),
    }
}

/// RFC 3986 `remove_dot_segments` on the path part, keeping the query.
fn normalize(path_and_query: &str) -> String {
    let (path, query) = split_query(path_and_query);
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *seg {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut p = out.join("/");
    if !p.starts_with('/') {
        p.insert(0, '/');
    }
    if let Some(q) = query {
        p.push('?');
        p.push_str(q);
    }
    p
}

/// Percent-escapes what may not appear raw in a request target (spaces, controls, non-ASCII and
/// `"<>\^`{|}`), as Go's `URL.EscapedPath` would when writing the request.
fn escape_uri(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_graphic() && !b"\"<>\\^`{|}".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Upstream `formatURL`'s path handling: origin-form, fragment dropped, `/` when empty.
pub(crate) fn origin_path(path: &str) -> String {
    let escaped = escape_uri(path.split('#').next().unwrap_or_default());
    if escaped.starts_with('/') {
        escaped
    } else {
        format!("/{escaped}")
    }
}
