//! `spelled!`: an enum whose every value has one spelling in specs (TOML)
//! and CSVs, declared once in a table (`Variant = "spelling"`). It gives
//! the enum `ALL` (every value, in the order error messages list them),
//! `name()`, `from_name()` and `names()`, and serde support reading and
//! writing the same spellings, so a list, its parser and its error
//! messages cannot drift apart.

/// Declares a spelled enum (module docs).
macro_rules! spelled {
    (
        $(#[$meta:meta])*
        pub enum $Enum:ident {
            $($(#[$vmeta:meta])* $Variant:ident = $spelling:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "&'static str")]
        pub enum $Enum {
            $($(#[$vmeta])* $Variant,)+
        }

        impl $Enum {
            /// Every value, in the order error messages and docs list them.
            pub const ALL: &'static [$Enum] = &[$($Enum::$Variant,)+];

            /// The spelling in specs (TOML) and CSVs.
            pub fn name(self) -> &'static str {
                match self {
                    $($Enum::$Variant => $spelling,)+
                }
            }

            /// The value spelled `s`, if any.
            pub fn from_name(s: &str) -> Option<$Enum> {
                Self::ALL.iter().copied().find(|x| x.name() == s)
            }

            /// Every spelling, `, `-separated, in [`Self::ALL`] order.
            pub fn names() -> String {
                Self::ALL
                    .iter()
                    .map(|x| x.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        }

        impl TryFrom<String> for $Enum {
            type Error = String;
            fn try_from(s: String) -> Result<$Enum, String> {
                $Enum::from_name(&s)
                    .ok_or_else(|| format!("expected one of {}, got `{s}`", $Enum::names()))
            }
        }

        impl From<$Enum> for &'static str {
            fn from(x: $Enum) -> &'static str {
                x.name()
            }
        }

        impl From<$Enum> for String {
            fn from(x: $Enum) -> String {
                x.name().to_string()
            }
        }

        impl std::fmt::Display for $Enum {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

pub(super) use spelled;
