//! Kubernetes resource quantities (`100m`, `1Gi`, `1e3`) as exact integers, upstream
//! `apimachinery/pkg/api/resource`'s parsing rules.
//!
//! Here rather than in the kubelet's `resources` module because `containerLogMaxSize` and the
//! reserved-memory flag are quantities too, and configuration is a leaf that the kubelet builds on.

/// Parses a Kubernetes quantity into thousandths of its unit ("100m" -> 100, "1" -> 1000,
/// "1Gi" -> 1073741824000). Returns None for malformed input.
pub fn parse_milli(q: &str) -> Option<i128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    // Exponent notation ("1e3") is a suffix of its own in upstream; handle it first.
    let (num, suffix, exp10) = if let Some(rest) = suffix.strip_prefix(['e', 'E']) {
        (num, "", rest.parse::<i32>().ok()?)
    } else {
        (num, suffix, 0)
    };
    let (mul_num, mul_den): (i128, i128) = match suffix {
        "" => (1000, 1),
        "m" => (1, 1),
        "k" => (1_000_000, 1),
        "M" => (1_000_000_000, 1),
        "G" => (1_000_000_000_000, 1),
        "T" => (1_000_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1024 * 1000, 1),
        "Mi" => (1024i128.pow(2) * 1000, 1),
        "Gi" => (1024i128.pow(3) * 1000, 1),
        "Ti" => (1024i128.pow(4) * 1000, 1),
        "Pi" => (1024i128.pow(5) * 1000, 1),
        "n" => (1, 1_000_000),
        "u" => (1, 1000),
        _ => return None,
    };
    let negative = num.starts_with('-');
    let num = num.trim_start_matches(['+', '-']);
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    let mut value: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let mut scale_den: i128 = 10i128.checked_pow(frac_part.len() as u32)?;
    if exp10 >= 0 {
        value = value.checked_mul(10i128.checked_pow(exp10 as u32)?)?;
    } else {
        scale_den = scale_den.checked_mul(10i128.checked_pow((-exp10) as u32)?)?;
    }
    // Round up as upstream does for milli values.
    let scaled = value.checked_mul(mul_num)?;
    let den = scale_den.checked_mul(mul_den)?;
    let v = (scaled + den - 1) / den;
    Some(if negative { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_milli("100m"), Some(100));
        assert_eq!(parse_milli("1"), Some(1000));
        assert_eq!(parse_milli("0.5"), Some(500));
        assert_eq!(parse_milli("1Gi"), Some(1_073_741_824_000));
        assert_eq!(parse_milli("128Mi"), Some(134_217_728_000));
        assert_eq!(parse_milli("1k"), Some(1_000_000));
        assert_eq!(parse_milli("1e3"), Some(1_000_000));
        assert_eq!(parse_milli("1.5Ki"), Some(1_536_000));
        assert_eq!(parse_milli("abc"), None);
        assert_eq!(parse_milli("1Qi"), None);
    }
}
