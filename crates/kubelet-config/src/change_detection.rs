//! `configMapAndSecretChangeDetectionStrategy` (upstream `ResourceChangeDetectionStrategy`):
//! how the kubelet reads the ConfigMaps and Secrets its pods reference. The kubelet's
//! `object_cache` and `objects` modules act on it; the configuration only parses it.

/// `configMapAndSecretChangeDetectionStrategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangeDetectionStrategy {
    /// A GET per object on every pod sync.
    Get,
    /// GET results reused for a TTL (upstream `cacheBasedManager`); a pod that newly references
    /// an object makes the next read fetch it again.
    Cache,
    /// A watch per referenced object (upstream's default).
    #[default]
    Watch,
}

impl ChangeDetectionStrategy {
    /// The v1beta1 spelling (`Get`, `Cache`, `Watch`); anything else is not a strategy.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Get" => Some(Self::Get),
            "Cache" => Some(Self::Cache),
            "Watch" => Some(Self::Watch),
            _ => None,
        }
    }
}
