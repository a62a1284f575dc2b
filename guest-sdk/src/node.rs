//! What node bodies may return.

use std::fmt;

use crate::context::Interrupted;
use crate::update::{Command, Update};

/// Why a node did not produce an update: it failed, or it paused for a human.
///
/// Any error that implements [`Display`](fmt::Display) converts into a
/// failure, and [`Interrupted`] converts into a pause, so one `?` handles
/// both in a node returning `Result<Update, NodeError>`:
///
/// ```
/// use sandgraph_sdk::{Context, NodeError, Update};
///
/// fn node(state: serde_json::Value, ctx: &Context) -> Result<Update, NodeError> {
///     let n: i64 = state["n"].to_string().parse()?; // a failure on bad input
///     let ok = ctx.interrupt(n)?;                   // a pause
///     if ok != true {
///         return Err(NodeError::msg("not approved"));
///     }
///     Ok(Update::new().set("n", n + 1))
/// }
/// ```
pub struct NodeError(ErrorKind);

enum ErrorKind {
    Failed(String),
    Interrupted(Interrupted),
}

impl NodeError {
    /// A failure with `message`, reported to the host as `failed`.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self(ErrorKind::Failed(message.to_string()))
    }

    /// True if this is a pause for a human rather than a failure.
    pub fn is_interrupt(&self) -> bool {
        matches!(self.0, ErrorKind::Interrupted(_))
    }
}

// No `Display` on purpose: with it, the blanket `From` below would overlap
// with `From<T> for T`.
impl fmt::Debug for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            ErrorKind::Failed(message) => write!(f, "NodeError({message:?})"),
            ErrorKind::Interrupted(interrupted) => fmt::Debug::fmt(interrupted, f),
        }
    }
}

impl<E: fmt::Display> From<E> for NodeError {
    fn from(error: E) -> Self {
        Self::msg(error)
    }
}

impl From<Interrupted> for NodeError {
    fn from(interrupted: Interrupted) -> Self {
        Self(ErrorKind::Interrupted(interrupted))
    }
}

/// The successful outcome of a node body, before encoding.
#[doc(hidden)]
#[derive(Debug)]
pub enum Output {
    Update(Update),
    Command(Command),
}

/// The encoded outcome of a node body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// A JSON object of state writes.
    Update(String),
    /// Writes, goto targets and (node, payload JSON) sends.
    Command {
        update: String,
        goto: Vec<String>,
        sends: Vec<(String, String)>,
    },
    /// Pause with this JSON payload.
    Interrupt(String),
}

mod sealed {
    pub trait Sealed {}
}

/// Types a node body may return: [`Update`], [`Command`], and `Result`s of
/// either whose error converts into [`NodeError`] (any
/// [`Display`](fmt::Display) error, [`Interrupted`], or `NodeError` itself).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a node result",
    label = "a node must return `Update`, `Command`, or `Result<Update | Command, E>`",
    note = "`E` may be any `Display` error, `Interrupted`, or `NodeError`"
)]
pub trait IntoNodeResult: sealed::Sealed {
    #[doc(hidden)]
    fn into_node_result(self) -> Result<Output, NodeError>;
}

impl sealed::Sealed for Update {}
impl IntoNodeResult for Update {
    fn into_node_result(self) -> Result<Output, NodeError> {
        Ok(Output::Update(self))
    }
}

impl sealed::Sealed for Command {}
impl IntoNodeResult for Command {
    fn into_node_result(self) -> Result<Output, NodeError> {
        Ok(Output::Command(self))
    }
}

impl<T: IntoNodeResult, E: Into<NodeError>> sealed::Sealed for Result<T, E> {}
impl<T: IntoNodeResult, E: Into<NodeError>> IntoNodeResult for Result<T, E> {
    fn into_node_result(self) -> Result<Output, NodeError> {
        self.map_err(Into::into)?.into_node_result()
    }
}

/// Encodes a node body's result for the wire. A serialization failure is a
/// node failure, as is an interrupt whose payload does not serialize.
pub(crate) fn encode(result: Result<Output, NodeError>) -> Result<Outcome, String> {
    match result {
        Ok(Output::Update(update)) => Ok(Outcome::Update(update.into_json()?)),
        Ok(Output::Command(command)) => {
            let (update, goto, sends) = command.into_wire()?;
            Ok(Outcome::Command {
                update,
                goto,
                sends,
            })
        }
        Err(NodeError(ErrorKind::Failed(message))) => Err(message),
        Err(NodeError(ErrorKind::Interrupted(Interrupted { payload }))) => {
            let payload = payload
                .and_then(|value| serde_json::to_string(&value).map_err(|err| err.to_string()));
            match payload {
                Ok(payload) => Ok(Outcome::Interrupt(payload)),
                Err(err) => Err(format!("interrupt payload: {err}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Context;
    use serde_json::json;

    fn run<R: IntoNodeResult>(r: R) -> Result<Outcome, String> {
        encode(r.into_node_result())
    }

    #[test]
    fn results_encode() {
        assert_eq!(
            run(Update::new().set("a", 1)),
            Ok(Outcome::Update(r#"{"a":1}"#.into()))
        );
        assert_eq!(
            run(Command::new().goto("x")),
            Ok(Outcome::Command {
                update: "{}".into(),
                goto: vec!["x".into()],
                sends: vec![]
            })
        );
        assert_eq!(run(Err::<Update, _>("boom")), Err("boom".to_string()));
        assert_eq!(
            run(Err::<Command, _>(NodeError::msg(format!("n={}", 3)))),
            Err("n=3".to_string())
        );
        let parse = "x".parse::<i32>().map(|n| Update::new().set("n", n));
        assert_eq!(run(parse), Err("invalid digit found in string".into()));
    }

    #[test]
    fn interrupts_encode_through_question_mark() {
        fn node(ctx: &Context) -> Result<Update, NodeError> {
            let first = ctx.interrupt("first?")?;
            let second = ctx.interrupt(json!({"second": first}))?;
            Ok(Update::new().set("answers", [first, second]))
        }
        let ctx = Context::default();
        assert_eq!(
            run(node(&ctx)),
            Ok(Outcome::Interrupt(r#""first?""#.into()))
        );
        let ctx = Context::default().with_resume([json!(1)]);
        assert_eq!(
            run(node(&ctx)),
            Ok(Outcome::Interrupt(r#"{"second":1}"#.into()))
        );
        let ctx = Context::default().with_resume([json!(1), json!(2)]);
        assert_eq!(
            run(node(&ctx)),
            Ok(Outcome::Update(r#"{"answers":[1,2]}"#.into()))
        );

        // `Result<_, Interrupted>` works directly too.
        let direct: Result<Update, Interrupted> =
            Context::default().interrupt(7).map(|_| Update::new());
        assert_eq!(run(direct), Ok(Outcome::Interrupt("7".into())));
    }
}
