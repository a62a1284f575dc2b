//! The built-in reducers: how one write combines with a channel's value.
//!
//! Custom reducers run guest code and are applied by the executor through
//! [`Worker::reduce`](crate::Worker::reduce).

use serde_json::{Map, Number, Value};

use crate::json::MAX_SAFE_INTEGER;
pub(crate) use crate::json::kind;
use crate::{ErrorCode, Reducer, RunError};

/// Folds `update`, written by node `writer`, into `channel`'s `current`
/// value (`None` when the channel has none yet) with a built-in reducer.
///
/// Fails with `invalid_update` when the update or the current value does not
/// fit the reducer, and for [`Reducer::Custom`], which needs a worker.
pub(crate) fn apply(
    reducer: Reducer,
    channel: &str,
    current: Option<&Value>,
    update: Value,
    writer: &str,
) -> Result<Value, RunError> {
    let fail = |what: String| {
        RunError::new(
            ErrorCode::InvalidUpdate,
            format!(
                "node {writer:?} wrote to channel {channel:?} ({} reducer): {what}",
                reducer_name(reducer)
            ),
        )
    };
    match reducer {
        Reducer::LastValue => Ok(update),
        Reducer::Append => {
            let mut items = match current {
                None => Vec::new(),
                Some(Value::Array(items)) => items.clone(),
                Some(other) => {
                    return Err(fail(format!(
                        "the current value is {}, not an array",
                        kind(other)
                    )));
                }
            };
            match update {
                Value::Array(more) => items.extend(more),
                other => items.push(other),
            }
            Ok(Value::Array(items))
        }
        Reducer::Merge => {
            let mut merged = match current {
                None => Map::new(),
                Some(Value::Object(map)) => map.clone(),
                Some(other) => {
                    return Err(fail(format!(
                        "the current value is {}, not an object",
                        kind(other)
                    )));
                }
            };
            match update {
                Value::Object(more) => merged.extend(more),
                other => {
                    return Err(fail(format!(
                        "the update is {}, not an object",
                        kind(&other)
                    )));
                }
            }
            Ok(Value::Object(merged))
        }
        Reducer::Add => {
            let zero = Value::from(0);
            let current = current.unwrap_or(&zero);
            let (Value::Number(a), Value::Number(b)) = (current, &update) else {
                return Err(fail(format!(
                    "cannot add {} to {}: both must be numbers",
                    kind(&update),
                    kind(current)
                )));
            };
            add_numbers(a, b).map_err(fail)
        }
        Reducer::Custom => Err(fail(
            "a custom reducer must be applied through the graph's reduce export".to_owned(),
        )),
    }
}

/// `a + b`: exact when both are integers (staying within ±(2^53−1)),
/// otherwise in f64 (staying finite).
fn add_numbers(a: &Number, b: &Number) -> Result<Value, String> {
    if let (Some(x), Some(y)) = (as_integer(a), as_integer(b)) {
        let sum = x + y;
        return if sum.unsigned_abs() <= MAX_SAFE_INTEGER.unsigned_abs().into() {
            // Within ±(2^53−1), so it fits an i64.
            i64::try_from(sum)
                .map(Value::from)
                .map_err(|_| format!("{x} + {y} overflows"))
        } else {
            Err(format!(
                "{x} + {y} = {sum} is outside the safe integer range ±(2^53-1)"
            ))
        };
    }
    let (Some(x), Some(y)) = (a.as_f64(), b.as_f64()) else {
        return Err(format!("cannot add {a} and {b}"));
    };
    let sum = x + y;
    // -0.0 can only come from -0.0 + -0.0, which lossless inputs exclude;
    // normalize anyway so the result is always lossless.
    let sum = if sum == 0.0 { 0.0 } else { sum };
    Number::from_f64(sum)
        .map(Value::Number)
        .ok_or_else(|| format!("{x} + {y} is not a finite number"))
}

fn as_integer(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

fn reducer_name(reducer: Reducer) -> &'static str {
    match reducer {
        Reducer::LastValue => "last-value",
        Reducer::Append => "append",
        Reducer::Merge => "merge",
        Reducer::Add => "add",
        Reducer::Custom => "custom",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ok(reducer: Reducer, current: Option<Value>, update: Value) -> Value {
        apply(reducer, "ch", current.as_ref(), update, "w").unwrap()
    }

    fn err(reducer: Reducer, current: Option<Value>, update: Value) -> RunError {
        let e = apply(reducer, "ch", current.as_ref(), update, "w").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidUpdate);
        assert!(e.message.contains(r#"node "w""#), "{e}");
        assert!(e.message.contains(r#"channel "ch""#), "{e}");
        e
    }

    #[test]
    fn last_value_replaces() {
        assert_eq!(
            ok(Reducer::LastValue, Some(json!([1])), json!("x")),
            json!("x")
        );
        assert_eq!(ok(Reducer::LastValue, None, json!(null)), json!(null));
    }

    #[test]
    fn append() {
        assert_eq!(ok(Reducer::Append, None, json!(1)), json!([1]));
        assert_eq!(ok(Reducer::Append, None, json!([1, 2])), json!([1, 2]));
        assert_eq!(
            ok(Reducer::Append, Some(json!([0])), json!([1, [2]])),
            json!([0, 1, [2]])
        );
        assert_eq!(
            ok(Reducer::Append, Some(json!(["a"])), json!({"b": 1})),
            json!(["a", {"b": 1}])
        );
        let e = err(Reducer::Append, Some(json!({})), json!(1));
        assert!(e.message.contains("an object, not an array"), "{e}");
    }

    #[test]
    fn merge() {
        assert_eq!(ok(Reducer::Merge, None, json!({"a": 1})), json!({"a": 1}));
        assert_eq!(
            ok(
                Reducer::Merge,
                Some(json!({"a": 1, "b": {"x": 1}})),
                json!({"b": {"y": 2}, "c": 3})
            ),
            json!({"a": 1, "b": {"y": 2}, "c": 3})
        );
        assert!(
            err(Reducer::Merge, None, json!([1]))
                .message
                .contains("an array, not an object")
        );
        assert!(
            err(Reducer::Merge, Some(json!(3)), json!({}))
                .message
                .contains("current value is a number")
        );
    }

    #[test]
    fn add() {
        assert_eq!(ok(Reducer::Add, None, json!(5)), json!(5));
        assert_eq!(ok(Reducer::Add, Some(json!(2)), json!(-5)), json!(-3));
        assert_eq!(ok(Reducer::Add, Some(json!(1)), json!(0.5)), json!(1.5));
        assert_eq!(ok(Reducer::Add, Some(json!(0.25)), json!(0.25)), json!(0.5));
        assert_eq!(ok(Reducer::Add, Some(json!(-0.5)), json!(0.5)), json!(0.0));
        assert_eq!(
            ok(Reducer::Add, Some(json!(9007199254740990_i64)), json!(1)),
            json!(9007199254740991_i64)
        );
        let e = err(Reducer::Add, Some(json!(9007199254740991_i64)), json!(1));
        assert!(e.message.contains("safe integer range"), "{e}");
        let e = err(Reducer::Add, Some(json!(-9007199254740991_i64)), json!(-1));
        assert!(e.message.contains("safe integer range"), "{e}");
        let e = err(Reducer::Add, Some(json!(1.7e308)), json!(1.7e308));
        assert!(e.message.contains("not a finite number"), "{e}");
        let e = err(Reducer::Add, Some(json!(1)), json!("2"));
        assert!(e.message.contains("cannot add a string to a number"), "{e}");
        let e = err(Reducer::Add, Some(json!([])), json!(2));
        assert!(e.message.contains("to an array"), "{e}");
    }

    #[test]
    fn custom_needs_a_worker() {
        err(Reducer::Custom, None, json!(1));
    }
}
