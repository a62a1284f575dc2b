//! What a node (or `validate`) knows about the call it runs in.

use std::cell::Cell;
use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::log::Level;

/// The call facts as they cross the boundary (JSON still as text).
#[derive(Debug, Default)]
pub(crate) struct CallInfo {
    pub(crate) tool: String,
    pub(crate) request: Option<String>,
    pub(crate) thread_id: Option<String>,
    pub(crate) step: u32,
    pub(crate) resume: Vec<String>,
    pub(crate) configurable: String,
}

/// Facts about the call shared by [`Context`] and [`ValidateContext`].
#[derive(Debug, Clone, Default)]
struct Facts {
    tool: String,
    request: Option<String>,
    thread_id: Option<String>,
    step: u32,
    configurable: Map<String, Value>,
}

impl Facts {
    /// Decodes `configurable`; also hands back the resume values, still as
    /// text, which only [`Context`] needs.
    fn decode(info: CallInfo) -> Result<(Self, Vec<String>), String> {
        let configurable = match crate::decode::from_json::<Value>(&info.configurable) {
            Ok(Value::Object(map)) => map,
            Ok(other) => {
                return Err(format!(
                    "call context: configurable must be a JSON object, not {}",
                    sandgraph_spec::json::kind(&other)
                ));
            }
            Err(err) => return Err(format!("call context: configurable: {err}")),
        };
        let facts = Facts {
            tool: info.tool,
            request: info.request,
            thread_id: info.thread_id,
            step: info.step,
            configurable,
        };
        Ok((facts, info.resume))
    }
}

/// Accessors shared by both context types.
macro_rules! facts_accessors {
    () => {
        /// The tool name the graph is mounted under.
        pub fn tool(&self) -> &str {
            &self.facts.tool
        }

        /// The original request text, when a model routed the call.
        pub fn request(&self) -> Option<&str> {
            self.facts.request.as_deref()
        }

        /// The durable thread, when the run has one.
        pub fn thread_id(&self) -> Option<&str> {
            self.facts.thread_id.as_deref()
        }

        /// The superstep number, from 0.
        pub fn step(&self) -> u32 {
            self.facts.step
        }

        /// Extra configurable keys the caller passed.
        pub fn configurable(&self) -> &Map<String, Value> {
            &self.facts.configurable
        }

        /// True once the run's soft deadline has passed or its caller
        /// cancelled: wrap up and return. After a grace period the host stops
        /// the graph by force. (Always false off wasm.)
        pub fn cancelled(&self) -> bool {
            crate::cancelled()
        }

        /// Writes `message` to the host log at `level`.
        pub fn log(&self, level: Level, message: impl AsRef<str>) {
            crate::log::log(level, message);
        }

        /// Sets the tool name (for native tests).
        pub fn with_tool(mut self, tool: impl Into<String>) -> Self {
            self.facts.tool = tool.into();
            self
        }

        /// Sets the request text (for native tests).
        pub fn with_request(mut self, request: impl Into<String>) -> Self {
            self.facts.request = Some(request.into());
            self
        }

        /// Sets the thread id (for native tests).
        pub fn with_thread_id(mut self, thread_id: impl Into<String>) -> Self {
            self.facts.thread_id = Some(thread_id.into());
            self
        }

        /// Sets the superstep number (for native tests).
        pub fn with_step(mut self, step: u32) -> Self {
            self.facts.step = step;
            self
        }

        /// Sets the configurable keys (for native tests).
        pub fn with_configurable(mut self, configurable: Map<String, Value>) -> Self {
            self.facts.configurable = configurable;
            self
        }
    };
}

/// What a node body knows about its call, and how it pauses for a human.
///
/// Nodes registered with [`Graph::node_with_context`](crate::Graph::node_with_context)
/// receive one. In native tests build one with `Context::default()` and the
/// `with_*` setters.
#[derive(Debug, Default)]
pub struct Context {
    facts: Facts,
    resume: Vec<Value>,
    interrupts: Cell<usize>,
}

impl Context {
    /// The graph tools this graph may call, through the host
    /// ([`crate::tools`]).
    pub fn tools(&self) -> crate::tools::Tools {
        crate::tools::Tools::new()
    }

    /// The models this graph may ask, through the host ([`crate::llm`]).
    pub fn llm(&self) -> crate::llm::Llm {
        crate::llm::Llm::new()
    }

    pub(crate) fn from_info(info: CallInfo) -> Result<Self, String> {
        let (facts, resume) = Facts::decode(info)?;
        let resume = resume
            .iter()
            .enumerate()
            .map(|(i, text)| {
                crate::decode::from_json::<Value>(text)
                    .map_err(|err| format!("call context: resume value {i}: {err}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            facts,
            resume,
            interrupts: Cell::new(0),
        })
    }

    facts_accessors!();

    /// Pauses the run for a human, LangGraph-style.
    ///
    /// The k-th call to `interrupt` in one task returns the k-th resume
    /// value if the caller has supplied it. Otherwise it returns
    /// [`Err(Interrupted)`](Interrupted): propagate it with `?` and the run
    /// pauses after this superstep, showing `payload` to the caller. When
    /// the caller resumes, the node runs again from the top, and this time
    /// the call returns the answer.
    ///
    /// ```
    /// use sandgraph_sdk::{Context, NodeError, Update};
    /// use serde_json::json;
    ///
    /// fn approve(_: serde_json::Value, ctx: &Context) -> Result<Update, NodeError> {
    ///     let answer = ctx.interrupt(json!({"question": "ship it?"}))?;
    ///     Ok(Update::new().set("approved", answer == json!("yes")))
    /// }
    ///
    /// // First run: no resume value yet, so the node pauses.
    /// assert!(approve(json!({}), &Context::default()).is_err());
    /// // After the caller answers "yes":
    /// let ctx = Context::default().with_resume([json!("yes")]);
    /// let update = approve(json!({}), &ctx).unwrap();
    /// assert_eq!(update.get("approved"), Some(&json!(true)));
    /// ```
    pub fn interrupt(&self, payload: impl Serialize) -> Result<Value, Interrupted> {
        let index = self.interrupts.get();
        self.interrupts.set(index + 1);
        match self.resume.get(index) {
            Some(value) => Ok(value.clone()),
            None => Err(Interrupted {
                payload: serde_json::to_value(payload).map_err(|err| err.to_string()),
            }),
        }
    }

    /// Sets the resume values, oldest first (for native tests).
    pub fn with_resume(mut self, resume: impl IntoIterator<Item = Value>) -> Self {
        self.resume = resume.into_iter().collect();
        self
    }
}

/// What [`Graph::validate`](crate::Graph::validate) knows about the call.
#[derive(Debug, Clone, Default)]
pub struct ValidateContext {
    facts: Facts,
}

impl ValidateContext {
    pub(crate) fn from_info(info: CallInfo) -> Result<Self, String> {
        let (facts, _resume) = Facts::decode(info)?;
        Ok(Self { facts })
    }

    facts_accessors!();
}

/// The run must pause for a human: returned by [`Context::interrupt`] and
/// meant to be propagated with `?`.
///
/// A node that returns it (directly, or inside a
/// [`NodeError`](crate::NodeError)) ends its task with an interrupt carrying
/// the payload given to `interrupt`.
pub struct Interrupted {
    pub(crate) payload: Result<Value, String>,
}

impl Interrupted {
    /// The payload shown to the caller (`None` if it failed to serialize,
    /// which makes the node fail instead).
    pub fn payload(&self) -> Option<&Value> {
        self.payload.as_ref().ok()
    }
}

// No `Display` on purpose: `NodeError: From<E: Display>` must not swallow
// interrupts as failures.
impl fmt::Debug for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.payload {
            Ok(payload) => write!(f, "Interrupted({payload})"),
            Err(err) => write!(f, "Interrupted(<unserializable payload: {err}>)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(resume: &[&str], configurable: &str) -> CallInfo {
        CallInfo {
            tool: "t".into(),
            resume: resume.iter().map(|s| s.to_string()).collect(),
            configurable: configurable.into(),
            step: 3,
            ..CallInfo::default()
        }
    }

    #[test]
    fn interrupt_returns_resume_values_in_order_then_pauses() {
        let ctx = Context::from_info(info(&[r#""first""#, "2"], "{}")).unwrap();
        assert_eq!(ctx.interrupt("q1").unwrap(), json!("first"));
        assert_eq!(ctx.interrupt("q2").unwrap(), json!(2));
        let paused = ctx.interrupt(json!({"q": 3})).unwrap_err();
        assert_eq!(paused.payload(), Some(&json!({"q": 3})));
        // Each later call is a further index, still unanswered.
        assert!(ctx.interrupt("q4").is_err());
    }

    #[test]
    fn first_interrupt_without_resume_pauses() {
        let ctx = Context::from_info(info(&[], "{}")).unwrap();
        assert_eq!(ctx.interrupt("q").unwrap_err().payload(), Some(&json!("q")));
        assert_eq!(ctx.step(), 3);
        assert_eq!(ctx.tool(), "t");
    }

    #[test]
    fn malformed_context_is_an_error_not_a_panic() {
        let err = Context::from_info(info(&["{"], "{}")).unwrap_err();
        assert!(err.starts_with("call context: resume value 0: "), "{err}");
        let err = Context::from_info(info(&[], "[]")).unwrap_err();
        assert_eq!(
            err,
            "call context: configurable must be a JSON object, not an array"
        );
        let err = ValidateContext::from_info(info(&[], "")).unwrap_err();
        assert!(err.starts_with("call context: configurable: "), "{err}");
        let ctx = ValidateContext::from_info(info(&[], r#"{"k":1}"#)).unwrap();
        assert_eq!(ctx.configurable()["k"], json!(1));
    }
}
