//! The source language of a hook module, as its toolchain recorded it in the wasm
//! `producers` custom section (the tool-conventions' `language` field), for trace spans.
//! A component's section sits in its core modules, so nested modules are read too.

use wasmparser::{KnownCustom, Parser, Payload};

/// The first language named by a `producers` section of `bytes` (`Rust`, `C11`, …), or
/// `None` when no section names one (hand-written WAT, a stripped module) or the bytes do
/// not parse (the compiler has said why already).
pub fn source_language(bytes: &[u8]) -> Option<String> {
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(Payload::CustomSection(section)) = payload else {
            continue;
        };
        let KnownCustom::Producers(producers) = section.as_known() else {
            continue;
        };
        for field in producers.into_iter().flatten() {
            if field.name != "language" {
                continue;
            }
            if let Some(Ok(value)) = field.values.into_iter().next() {
                return Some(value.name.to_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::source_language;

    #[test]
    fn reads_the_language_a_toolchain_recorded() {
        let bytes = wat::parse_str(
            r#"(module (@producers (language "Rust" "") (processed-by "rustc" "1.95.0")))"#,
        )
        .expect("valid WAT");
        assert_eq!(source_language(&bytes).as_deref(), Some("Rust"));
    }

    #[test]
    fn names_none_without_a_producers_section() {
        let bytes = wat::parse_str("(module)").expect("valid WAT");
        assert_eq!(source_language(&bytes), None);
        assert_eq!(source_language(b"not wasm"), None);
    }
}
