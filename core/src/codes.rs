//! Fieldless enums whose variants stand for wire codes.
//!
//! [`code_enum!`] declares such an enum together with its `from_code`, so
//! that each variant's code is written once: a variant added to the enum is
//! also one that parses.

/// Declares a fieldless enum whose variants have explicit codes of the
/// integer type given after its name, and its `const fn from_code`, which
/// answers `None` for codes no variant has.
macro_rules! code_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident: $repr:ident {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident = $code:literal,
            )+
        }
    ) => {
        $(#[$meta])*
        #[repr($repr)]
        $vis enum $name {
            $(
                $(#[$variant_meta])*
                $variant = $code,
            )+
        }

        impl $name {
            /// The variant with wire code `code`, if there is one.
            pub const fn from_code(code: $repr) -> Option<Self> {
                match code {
                    $($code => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }
    };
}
