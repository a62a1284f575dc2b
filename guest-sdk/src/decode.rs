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

/// A field of a state type that does not decode from a state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TypeMismatch {
    /// Where in the state, e.g. `tags` or `meta.score`.
    pub(crate) path: String,
    /// serde's reason, naming both types (`invalid type: sequence, expected
    /// a string`).
    pub(crate) message: String,
}

/// Decodes `state` (a JSON object, as text) into `T` and reports a field
/// whose value does not fit `T`'s type. A missing field is not a
/// mismatch (the run's input may fill it), nor is a failure at the root (a
/// body whose input is a `Send` payload rather than the state).
pub(crate) fn type_mismatch<T: DeserializeOwned>(state: &str) -> Option<TypeMismatch> {
    let mut de = serde_json::Deserializer::from_str(state);
    let err = serde_path_to_error::deserialize::<_, T>(&mut de).err()?;
    let path = err.path().to_string();
    let message = err.into_inner().to_string();
    let at_root = path == "." || path == "?";
    if at_root || message.starts_with("missing field") {
        return None;
    }
    // serde_json ends its messages with the position in the text, which
    // means nothing to the author here.
    let message = match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message,
    };
    Some(TypeMismatch { path, message })
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
    fn type_mismatches_are_fields_of_the_wrong_type_only() {
        let mismatch = type_mismatch::<State>(r#"{"tags":"x"}"#).unwrap();
        assert_eq!(mismatch.path, "tags");
        assert_eq!(
            mismatch.message,
            "invalid type: string \"x\", expected a sequence"
        );
        assert_eq!(
            type_mismatch::<State>(r#"{"tags":[1]}"#).map(|m| m.path),
            Some("tags[0]".to_owned())
        );
        // `topic` is missing: the input fills it.
        assert_eq!(type_mismatch::<State>(r#"{"tags":[]}"#), None);
        assert_eq!(type_mismatch::<State>("{}"), None);
        // A payload type that is not a struct fails at the root: skipped.
        assert_eq!(type_mismatch::<i64>(r#"{"tags":[]}"#), None);
    }

    #[test]
    fn rejects_trailing_text_and_garbage() {
        assert!(from_json::<serde_json::Value>("{} x").is_err());
        assert!(from_json::<serde_json::Value>("").is_err());
        assert!(from_json::<serde_json::Value>(&"[".repeat(100_000)).is_err());
    }
}
