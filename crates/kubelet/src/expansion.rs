//! `$(VAR)` expansion in env values, command and args (upstream
//! `third_party/forked/golang/expansion`).
//!
//! The syntax is deliberately not the shell's: `$(NAME)` is replaced when NAME is known, left as
//! written when it is not (so a typo shows up verbatim in the container), `$$` is an escaped `$`,
//! and every other `$` passes through untouched (`$HOME`, `${X}` and `$?` reach the shell as is).

/// A lookup in `contexts`, first match wins (upstream `MappingFuncFor`): returns the value of
/// `name`, or `$(name)` unchanged when no context has it.
pub fn mapping_for<'a>(contexts: &'a [&'a dyn Lookup]) -> impl Fn(&str) -> String + 'a {
    move |name| {
        contexts
            .iter()
            .find_map(|c| c.lookup(name))
            .unwrap_or_else(|| format!("$({name})"))
    }
}

/// Something variables can be looked up in.
pub trait Lookup {
    fn lookup(&self, name: &str) -> Option<String>;
}

impl<S: std::hash::BuildHasher> Lookup for std::collections::HashMap<String, String, S> {
    fn lookup(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

impl Lookup for std::collections::BTreeMap<String, String> {
    fn lookup(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// Expands `$(VAR)` references in `input` with `mapping` (upstream `expansion.Expand`).
///
/// Works on bytes like upstream; `$` and the brackets are ASCII, so every slice boundary falls on
/// a character boundary and the output stays valid UTF-8.
pub fn expand(input: &str, mapping: impl Fn(&str) -> String) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            match rest.as_bytes()[0] {
                // `$$`: an escaped operator.
                b'$' => {
                    out.push('$');
                    cursor += 1;
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        out.push_str(&mapping(&rest[1..close]));
                        cursor += close + 1;
                    }
                    // Incomplete reference: keep `$(` and go on after the bracket.
                    None => {
                        out.push_str("$(");
                        cursor += 1;
                    }
                },
                // A `$` that starts no expression stays; upstream also consumes the next byte
                // verbatim, which is the same output for every input that is valid UTF-8.
                _ => {
                    out.push('$');
                }
            }
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    out.push_str(&input[checkpoint.min(input.len())..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Upstream `TestMapReference`: later variables see the expanded values of earlier ones.
    #[test]
    fn map_reference() {
        let envs = [("FOO", "bar"), ("ZOO", "$(FOO)-1"), ("BLU", "$(ZOO)-2")];
        let mut declared = map(&envs);
        for (k, v) in envs {
            let expanded = {
                let ctx: [&dyn Lookup; 1] = [&declared];
                expand(v, mapping_for(&ctx))
            };
            declared.insert(k.into(), expanded);
        }
        assert_eq!(
            declared,
            map(&[("FOO", "bar"), ("ZOO", "bar-1"), ("BLU", "bar-1-2")])
        );
    }

    /// Upstream `doExpansionTest`, run with one context and with two (`TestMappingDual`).
    #[test]
    fn upstream_cases() {
        let single = map(&[
            ("VAR_A", "A"),
            ("VAR_B", "B"),
            ("VAR_C", "C"),
            ("VAR_REF", "$(VAR_A)"),
            ("VAR_EMPTY", ""),
        ]);
        let first = map(&[("VAR_A", "A"), ("VAR_EMPTY", "")]);
        let second = map(&[("VAR_B", "B"), ("VAR_C", "C"), ("VAR_REF", "$(VAR_A)")]);
        let cases = [
            ("whole string", "$(VAR_A)", "A"),
            ("repeat", "$(VAR_A)-$(VAR_A)", "A-A"),
            ("beginning", "$(VAR_A)-1", "A-1"),
            ("middle", "___$(VAR_B)___", "___B___"),
            ("end", "___$(VAR_C)", "___C"),
            ("compound", "$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
            ("escape & expand", "$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
            (
                "compound escape",
                "$$(VAR_A)_$$(VAR_B)",
                "$(VAR_A)_$(VAR_B)",
            ),
            ("mixed in escapes", "f000-$$VAR_A", "f000-$VAR_A"),
            ("backslash escape ignored", "foo\\$(VAR_C)bar", "foo\\Cbar"),
            (
                "backslash escape ignored 2",
                "foo\\\\$(VAR_C)bar",
                "foo\\\\Cbar",
            ),
            (
                "lots of backslashes",
                "foo\\\\\\\\$(VAR_A)bar",
                "foo\\\\\\\\Abar",
            ),
            (
                "nested var references",
                "$(VAR_A$(VAR_B))",
                "$(VAR_A$(VAR_B))",
            ),
            (
                "nested var references second type",
                "$(VAR_A$(VAR_B)",
                "$(VAR_A$(VAR_B)",
            ),
            ("value is a reference", "$(VAR_REF)", "$(VAR_A)"),
            (
                "value is a reference x 2",
                "%%$(VAR_REF)--$(VAR_REF)%%",
                "%%$(VAR_A)--$(VAR_A)%%",
            ),
            ("empty var", "foo$(VAR_EMPTY)bar", "foobar"),
            (
                "unterminated expression",
                "foo$(VAR_Awhoops!",
                "foo$(VAR_Awhoops!",
            ),
            (
                "expression without operator",
                "f00__(VAR_A)__",
                "f00__(VAR_A)__",
            ),
            ("shell special vars pass through", "$?_boo_$!", "$?_boo_$!"),
            ("bare operators are ignored", "$VAR_A", "$VAR_A"),
            (
                "undefined vars are passed through",
                "$(VAR_DNE)",
                "$(VAR_DNE)",
            ),
            (
                "multiple (even) operators, var undefined",
                "$$$$$$(BIG_MONEY)",
                "$$$(BIG_MONEY)",
            ),
            (
                "multiple (even) operators, var defined",
                "$$$$$$(VAR_A)",
                "$$$(VAR_A)",
            ),
            (
                "multiple (odd) operators, var undefined",
                "$$$$$$$(GOOD_ODDS)",
                "$$$$(GOOD_ODDS)",
            ),
            (
                "multiple (odd) operators, var defined",
                "$$$$$$$(VAR_A)",
                "$$$A",
            ),
            ("missing open expression", "$VAR_A)", "$VAR_A)"),
            ("shell syntax ignored", "${VAR_A}", "${VAR_A}"),
            (
                "trailing incomplete expression not consumed",
                "$(VAR_B)_______$(A",
                "B_______$(A",
            ),
            (
                "trailing incomplete expression, no content, is not consumed",
                "$(VAR_C)_______$(",
                "C_______$(",
            ),
            (
                "operator at end of input string is preserved",
                "$(VAR_A)foobarzab$",
                "Afoobarzab$",
            ),
            (
                "shell escaped incomplete expr",
                "foo-\\$(VAR_A",
                "foo-\\$(VAR_A",
            ),
            ("lots of $( in middle", "--$($($($($--", "--$($($($($--"),
            (
                "lots of $( in beginning",
                "$($($($($--foo$(",
                "$($($($($--foo$(",
            ),
            ("lots of $( at end", "foo0--$($($($(", "foo0--$($($($("),
            (
                "escaped operators in variable names are not escaped",
                "$(foo$$var)",
                "$(foo$$var)",
            ),
            ("newline not expanded", "\n", "\n"),
            // Not upstream's: non-ASCII after a `$` stays intact.
            ("non-ascii after operator", "$é$(VAR_A)ü", "$éAü"),
        ];
        let one: [&dyn Lookup; 1] = [&single];
        let two: [&dyn Lookup; 2] = [&first, &second];
        for (name, input, want) in cases {
            assert_eq!(expand(input, mapping_for(&one)), want, "{name}");
            assert_eq!(expand(input, mapping_for(&two)), want, "{name} (dual)");
        }
    }
}
