//! Values of the node flags `--node-labels` and `--register-with-taints` (upstream
//! `cliflag.NewMapStringString` and `utiltaints.ParseTaints`): the flag table parses them and the
//! kubelet registers the node with them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;

/// Parses `--node-labels` (`k=v,k2=v2`).
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("node label {item:?} must be key=value"))?;
        if k.is_empty() {
            return Err(format!("node label {item:?} has an empty key"));
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// Parses `--register-with-taints` (`key=value:Effect,key:Effect`).
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (kv, effect) = item
            .rsplit_once(':')
            .ok_or_else(|| format!("taint {item:?} must be key[=value]:Effect"))?;
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            return Err(format!("taint {item:?}: invalid effect {effect:?}"));
        }
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (kv, None),
        };
        if key.is_empty() {
            return Err(format!("taint {item:?} has an empty key"));
        }
        out.push(Taint {
            key: key.into(),
            value,
            effect: effect.into(),
            time_added: None,
        });
    }
    Ok(out)
}
