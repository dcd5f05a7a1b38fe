//! Values users name (the strategy axes): every value's name, the other
//! spellings accepted for it, what frameworks call it and what it means,
//! declared once in a table of [`Choice`]s. Parsing, printing, serde, the
//! CLI's help and error texts and `cephalo list strategies` all read the
//! table, so a new value is one row.

use std::fmt::Write as _;

/// One value of a named axis.
#[derive(Debug, Clone, Copy)]
pub struct Choice<T: 'static> {
    /// The value.
    pub value: T,
    /// Its name in flags, files and reports (`grad-op`).
    pub name: &'static str,
    /// Other spellings accepted on input (compared ignoring case, `-`, `_`
    /// and spaces: `shard-grad-op`, `zero2`).
    pub aliases: &'static [&'static str],
    /// What frameworks call it, for help texts (`SHARD_GRAD_OP / ZeRO-2`;
    /// empty when the name says it).
    pub known_as: &'static str,
    /// What it does, one line (`cephalo list strategies`).
    pub meaning: &'static str,
}

/// Lower case without `-`, `_` and spaces: how input spellings compare.
pub fn norm(s: &str) -> String {
    s.trim().to_ascii_lowercase().replace(['-', '_', ' '], "")
}

/// The name of `value` in `table`.
pub fn name<T: PartialEq>(table: &'static [Choice<T>], value: T) -> &'static str {
    table
        .iter()
        .find(|c| c.value == value)
        .map_or("?", |c| c.name)
}

/// The value `s` names in `table` (its name or an alias).
pub fn parse<T: Copy>(table: &'static [Choice<T>], s: &str) -> Option<T> {
    let n = norm(s);
    table
        .iter()
        .find(|c| norm(c.name) == n || c.aliases.iter().any(|a| norm(a) == n))
        .map(|c| c.value)
}

/// The names as a sentence: `full, grad-op, none or hybrid`.
pub fn expected<T>(table: &'static [Choice<T>]) -> String {
    let names: Vec<&str> = table.iter().map(|c| c.name).collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// A help text: `{what}: full (FULL_SHARD / ZeRO-3) | grad-op (...) | ...`.
pub fn help<T>(what: &str, table: &'static [Choice<T>]) -> String {
    let mut s = format!("{what}: ");
    for (i, c) in table.iter().enumerate() {
        if i > 0 {
            s.push_str(" | ");
        }
        s.push_str(c.name);
        if !c.known_as.is_empty() {
            let _ = write!(s, " ({})", c.known_as);
        }
    }
    s
}

/// The error serde's derived enums give for an unknown name (`unknown
/// variant `x`, expected one of `a`, `b`, `c``), so files read the same.
pub fn unknown<T>(s: &str, table: &'static [Choice<T>]) -> String {
    let quoted: Vec<String> = table.iter().map(|c| format!("`{}`", c.name)).collect();
    let expected = match quoted.len() {
        0 => return format!("unknown variant `{s}`, there are no variants"),
        1 => quoted[0].clone(),
        2 => format!("{} or {}", quoted[0], quoted[1]),
        _ => format!("one of {}", quoted.join(", ")),
    };
    format!("unknown variant `{s}`, expected {expected}")
}

/// Implements `Serialize` (the name) and `Deserialize` (exactly a name of
/// the table, as serde's derive would) for a type with a `CHOICES` table.
#[macro_export]
macro_rules! serde_by_name {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str($crate::choice::name(<$t>::CHOICES, *self))
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                <$t>::CHOICES
                    .iter()
                    .find(|c| c.name == s)
                    .map(|c| c.value)
                    .ok_or_else(|| {
                        serde::de::Error::custom($crate::choice::unknown(&s, <$t>::CHOICES))
                    })
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    static T: [Choice<u8>; 3] = [
        Choice {
            value: 1,
            name: "one",
            aliases: &["uno"],
            known_as: "I",
            meaning: "",
        },
        Choice {
            value: 2,
            name: "two-x",
            aliases: &[],
            known_as: "",
            meaning: "",
        },
        Choice {
            value: 3,
            name: "three",
            aliases: &[],
            known_as: "",
            meaning: "",
        },
    ];

    #[test]
    fn a_table_names_parses_and_explains() {
        assert_eq!(name(&T, 2), "two-x");
        assert_eq!(parse(&T, " TWO_X "), Some(2));
        assert_eq!(parse(&T, "Uno"), Some(1));
        assert_eq!(parse(&T, "four"), None);
        assert_eq!(expected(&T), "one, two-x or three");
        assert_eq!(help("N", &T), "N: one (I) | two-x | three");
        assert_eq!(
            unknown("x", &T),
            "unknown variant `x`, expected one of `one`, `two-x`, `three`"
        );
    }
}
