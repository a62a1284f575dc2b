//! What a node hands back: state writes ([`Update`]), optionally with
//! control flow ([`Command`]) and dynamic tasks ([`Send`]).

use serde::Serialize;
use serde_json::{Map, Value};

/// The state writes of one node, a JSON object from channel name to value.
///
/// Values are anything [`Serialize`]. How a write combines with the current
/// value is the channel's [`Reducer`](crate::Reducer): [`set`](Self::set)
/// writes one value as is; [`push`](Self::push) and
/// [`extend`](Self::extend) build a list of items for an
/// [`Append`](crate::Reducer::Append) channel (the host concatenates a list
/// update), so pushing a list adds it as one item.
///
/// ```
/// use sandgraph_sdk::Update;
///
/// let update = Update::new()
///     .set("status", "done")
///     .push("log", "step 1")
///     .extend("log", ["step 2", "step 3"]);
/// assert_eq!(update.get("log"), Some(&serde_json::json!(["step 1", "step 2", "step 3"])));
/// ```
///
/// A value that fails to serialize (a map with non-string keys, say) is not
/// lost silently: the node fails with the serializer's message.
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct Update {
    writes: Map<String, Value>,
    error: Option<String>,
    raw: Option<String>,
}

impl Update {
    /// An update that writes nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes `value` to `key`, replacing any earlier write to `key` in this
    /// update.
    pub fn set(mut self, key: impl Into<String>, value: impl Serialize) -> Self {
        let key = key.into();
        if let Some(value) = self.encode(&key, value) {
            self.writes.insert(key, value);
        }
        self
    }

    /// Adds one item to the list written to `key` (for an
    /// [`Append`](crate::Reducer::Append) channel).
    pub fn push(mut self, key: impl Into<String>, value: impl Serialize) -> Self {
        let key = key.into();
        if let Some(value) = self.encode(&key, value) {
            self.append(key, [value]);
        }
        self
    }

    /// Adds every item of `values` to the list written to `key`.
    pub fn extend<I>(mut self, key: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator,
        I::Item: Serialize,
    {
        let key = key.into();
        let encoded: Vec<Value> = values
            .into_iter()
            .filter_map(|value| self.encode(&key, value))
            .collect();
        self.append(key, encoded);
        self
    }

    /// An update from a serializable struct or map: each field is a write.
    ///
    /// ```
    /// #[derive(serde::Serialize)]
    /// struct Out { total: i64 }
    /// let update = sandgraph_sdk::Update::from_serialize(Out { total: 14 });
    /// assert_eq!(update.get("total"), Some(&serde_json::json!(14)));
    /// ```
    ///
    /// Anything that does not serialize to a JSON object makes the node fail.
    pub fn from_serialize(value: impl Serialize) -> Self {
        match serde_json::to_value(value) {
            Ok(Value::Object(writes)) => Self {
                writes,
                ..Self::default()
            },
            Ok(other) => Self {
                error: Some(format!(
                    "an update must be a JSON object, not {}",
                    sandgraph_spec::json::kind(&other)
                )),
                ..Self::default()
            },
            Err(err) => Self {
                error: Some(format!("update: {err}")),
                ..Self::default()
            },
        }
    }

    /// The value this update writes to `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.writes.get(key)
    }

    /// True when the update writes nothing.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.raw.is_none()
    }

    /// **For testing hosts only.** An update whose wire text is `text`,
    /// verbatim, even when it is not JSON. The host's hostile-guest tests use
    /// it to check that the host refuses bad output; a real graph never
    /// needs it. Requires the `unchecked-json` feature.
    #[cfg(feature = "unchecked-json")]
    pub fn raw_json_unchecked(text: impl Into<String>) -> Self {
        Self {
            raw: Some(text.into()),
            ..Self::default()
        }
    }

    /// The JSON object text sent to the host.
    pub(crate) fn into_json(self) -> Result<String, String> {
        if let Some(error) = self.error {
            return Err(error);
        }
        if let Some(raw) = self.raw {
            return Ok(raw);
        }
        serde_json::to_string(&self.writes).map_err(|err| format!("update: {err}"))
    }

    /// Serializes one value, remembering the first failure.
    fn encode(&mut self, key: &str, value: impl Serialize) -> Option<Value> {
        match serde_json::to_value(value) {
            Ok(value) => Some(value),
            Err(err) => {
                self.error
                    .get_or_insert_with(|| format!("update of \"{key}\": {err}"));
                None
            }
        }
    }

    /// Appends `new` to the list written to `key`, creating it if absent.
    /// An earlier single write becomes the list's first item, which is what
    /// the host's append reducer would have made of it.
    fn append(&mut self, key: String, new: impl IntoIterator<Item = Value>) {
        let mut items = match self.writes.remove(&key) {
            None => Vec::new(),
            Some(Value::Array(items)) => items,
            Some(single) => vec![single],
        };
        items.extend(new);
        self.writes.insert(key, Value::Array(items));
    }
}

/// State writes plus control flow: nodes to trigger next (`goto`, added to
/// the node's static edges) and dynamic tasks (`send`).
///
/// ```
/// use sandgraph_sdk::{Command, Update, END};
///
/// let cmd = Command::new()
///     .update(Update::new().set("answer", 42))
///     .goto("review")
///     .send("worker", serde_json::json!({"job": 1}))
///     .goto(END);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct Command {
    update: Update,
    goto: Vec<String>,
    sends: Vec<Send>,
}

impl Command {
    /// A command that writes nothing and goes nowhere extra.
    pub fn new() -> Self {
        Self::default()
    }

    /// The state writes (replacing earlier ones).
    pub fn update(mut self, update: Update) -> Self {
        self.update = update;
        self
    }

    /// Also triggers `node` (or [`END`](crate::END)) in the next superstep.
    pub fn goto(mut self, node: impl Into<String>) -> Self {
        self.goto.push(node.into());
        self
    }

    /// Also runs `node` in the next superstep with `payload` as its input.
    pub fn send(mut self, node: impl Into<String>, payload: impl Serialize) -> Self {
        self.sends.push(Send::new(node, payload));
        self
    }

    /// Adds every task of `sends`.
    pub fn sends(mut self, sends: impl IntoIterator<Item = Send>) -> Self {
        self.sends.extend(sends);
        self
    }

    /// Encodes the command: (update JSON, goto targets, (node, payload JSON)).
    #[allow(clippy::type_complexity)]
    pub(crate) fn into_wire(self) -> Result<(String, Vec<String>, Vec<(String, String)>), String> {
        let update = self.update.into_json()?;
        let sends = self
            .sends
            .into_iter()
            .map(Send::into_wire)
            .collect::<Result<_, _>>()?;
        Ok((update, self.goto, sends))
    }
}

/// A dynamic task: run `node` in the next superstep with `payload` as its
/// private input instead of the graph state (LangGraph's `Send`).
///
/// The node's state type decodes the payload.
///
/// ```
/// use sandgraph_sdk::Send;
/// let task = Send::new("square", serde_json::json!({"x": 3}));
/// assert_eq!(task.node(), "square");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Send {
    node: String,
    payload: Result<Value, String>,
}

impl Send {
    /// A task for `node` with input `payload`.
    pub fn new(node: impl Into<String>, payload: impl Serialize) -> Self {
        Self {
            node: node.into(),
            payload: serde_json::to_value(payload).map_err(|err| err.to_string()),
        }
    }

    /// The node the task runs.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The task's input, or `None` if it failed to serialize.
    pub fn payload(&self) -> Option<&Value> {
        self.payload.as_ref().ok()
    }

    /// Encodes the task: (node, payload JSON).
    pub(crate) fn into_wire(self) -> Result<(String, String), String> {
        let node = self.node;
        let payload = self
            .payload
            .and_then(|value| serde_json::to_string(&value).map_err(|err| err.to_string()))
            .map_err(|err| format!("send to \"{node}\": {err}"))?;
        Ok((node, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn wire(update: Update) -> Value {
        serde_json::from_str(&update.into_json().unwrap()).unwrap()
    }

    #[test]
    fn set_push_extend() {
        let update = Update::new()
            .set("a", 1)
            .set("a", 2)
            .push("log", "x")
            .push("log", json!(["nested"]))
            .extend("log", ["y", "z"])
            .extend("empty", Vec::<i32>::new());
        assert_eq!(
            wire(update),
            json!({"a": 2, "log": ["x", ["nested"], "y", "z"], "empty": []})
        );
    }

    #[test]
    fn push_after_set_keeps_the_set_value_as_first_item() {
        assert_eq!(
            wire(Update::new().set("log", "a").push("log", "b")),
            json!({"log": ["a", "b"]})
        );
        assert_eq!(
            wire(Update::new().set("log", json!(["a"])).push("log", "b")),
            json!({"log": ["a", "b"]})
        );
    }

    #[test]
    fn empty_update_is_an_empty_object() {
        assert!(Update::new().is_empty());
        assert_eq!(Update::new().into_json().unwrap(), "{}");
    }

    #[test]
    fn serialization_failures_surface() {
        let mut bad = BTreeMap::new();
        bad.insert((1, 2), "tuple keys are not JSON");
        let err = Update::new()
            .set("ok", 1)
            .set("bad", &bad)
            .into_json()
            .unwrap_err();
        assert!(err.starts_with("update of \"bad\": "), "{err}");

        let err = Update::from_serialize(5).into_json().unwrap_err();
        assert_eq!(err, "an update must be a JSON object, not a number");

        let err = Command::new().send("n", &bad).into_wire().unwrap_err();
        assert!(err.starts_with("send to \"n\": "), "{err}");
    }

    #[test]
    fn from_serialize_struct() {
        #[derive(Serialize)]
        struct Out {
            total: i64,
            name: &'static str,
        }
        assert_eq!(
            wire(Update::from_serialize(Out {
                total: 3,
                name: "x"
            })),
            json!({"total": 3, "name": "x"})
        );
    }

    #[test]
    fn command_wire() {
        let (update, goto, sends) = Command::new()
            .update(Update::new().set("k", true))
            .goto("a")
            .goto(crate::END)
            .send("w", json!({"x": 1}))
            .sends([Send::new("w", 2)])
            .into_wire()
            .unwrap();
        assert_eq!(update, r#"{"k":true}"#);
        assert_eq!(goto, ["a", "__end__"]);
        assert_eq!(
            sends,
            [
                ("w".to_owned(), r#"{"x":1}"#.to_owned()),
                ("w".to_owned(), "2".to_owned())
            ]
        );
    }
}
