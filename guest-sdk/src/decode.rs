//! Decoding host-supplied JSON text without panicking, with messages that
//! name the offending field.

use serde::de::DeserializeOwned;

/// Decodes `text` into `T`. The error names the path of the field at fault
/// (`tags[2]: invalid type: ...`) when there is one.
pub(crate) fn from_json<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if path == "." || path == "?" {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })?;
    de.end().map_err(|err| err.to_string())?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct State {
        topic: String,
        tags: Option<Vec<String>>,
    }

    #[test]
    fn names_the_field() {
        let err = from_json::<State>(r#"{"topic":"a","tags":["x",1]}"#).unwrap_err();
        assert!(
            err.starts_with("tags[1]: invalid type: integer `1`"),
            "{err}"
        );
        let err = from_json::<State>(r#"{"tags":[]}"#).unwrap_err();
        assert!(err.starts_with("missing field `topic`"), "{err}");
    }

    #[test]
    fn rejects_trailing_text_and_garbage() {
        assert!(from_json::<serde_json::Value>("{} x").is_err());
        assert!(from_json::<serde_json::Value>("").is_err());
        assert!(from_json::<serde_json::Value>(&"[".repeat(100_000)).is_err());
    }
}
