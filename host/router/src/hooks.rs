//! The routing loop's extension points: `pre-execute` before a chosen graph
//! runs and `post-execute` after it settles (seed: `graphTools/pre-execute`
//! and `graphTools/post-execute`, cordis waterfall events).
//!
//! Listeners run in registration order. Each gets the execution (and, after
//! the run, the settled outcome) and a `next` handle: awaiting
//! [`PreNext::run`] / [`PostNext::run`] hands over to the rest of the chain
//! and returns its decision; answering without calling it decides for the
//! whole chain, so the first decision wins. The end of the chain allows
//! (pre) or passes (post). A listener's error ends the request: the router
//! returns it as [`crate::RouteError::Hook`] (code `hook_error`) with the
//! phase, and the listener's error itself as its `source()`, unchanged, for
//! the caller to downcast.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use sandgraph_core::RunError;
use sandgraph_registry::ToolOutput;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// What a listener may fail with; it reaches the caller unchanged as the
/// source of [`crate::RouteError::Hook`].
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

/// One attempt to run a chosen graph. The same value reaches both hooks of
/// the attempt.
#[derive(Debug)]
pub struct Execution {
    /// The chosen tool.
    pub tool: String,
    /// Its arguments, already checked against the schema and `validate`.
    pub args: Value,
    /// The original request text.
    pub request: String,
    /// The caller's cancellation, also given to the run.
    pub cancel: CancellationToken,
    /// 1 for the model's first answer, 2 after the first re-ask, ...
    pub attempt: u32,
}

/// A `pre-execute` decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreDecision {
    /// Run the graph.
    Allow,
    /// Do not run it; the reason goes back to the model, which is asked
    /// again.
    Deny {
        /// Fed back to the model.
        reason: String,
    },
}

/// A `post-execute` decision.
#[derive(Debug, Clone, PartialEq)]
pub enum PostDecision {
    /// No decision: the outcome stands as it is.
    Pass,
    /// Reject the outcome, success or error; the reason goes back to the
    /// model, which is asked again.
    Block {
        /// Fed back to the model.
        reason: String,
    },
    /// Keep the outcome; with `result`, return that value to the caller
    /// instead (also when the graph failed). Listeners before this one saw
    /// the original.
    Accept {
        /// The value returned to the caller instead of the graph's.
        result: Option<Value>,
    },
}

/// How a graph run settled, as `post-execute` listeners see it.
pub type Settled = Result<ToolOutput, RunError>;

type PreFn = dyn Fn(Arc<Execution>, PreNext) -> BoxFuture<'static, Result<PreDecision, HookError>>
    + Send
    + Sync;
type PostFn = dyn Fn(
        Arc<Execution>,
        Arc<Settled>,
        PostNext,
    ) -> BoxFuture<'static, Result<PostDecision, HookError>>
    + Send
    + Sync;

/// The listeners of both events. Cheap to clone.
#[derive(Clone, Default)]
pub struct Hooks {
    pre: Vec<Arc<PreFn>>,
    post: Vec<Arc<PostFn>>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("pre_execute", &self.pre.len())
            .field("post_execute", &self.post.len())
            .finish()
    }
}

impl Hooks {
    /// Adds a `pre-execute` listener after those already registered.
    pub fn on_pre_execute<F, Fut>(&mut self, listener: F) -> &mut Self
    where
        F: Fn(Arc<Execution>, PreNext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<PreDecision, HookError>> + Send + 'static,
    {
        self.pre
            .push(Arc::new(move |exec, next| Box::pin(listener(exec, next))));
        self
    }

    /// Adds a `post-execute` listener after those already registered.
    pub fn on_post_execute<F, Fut>(&mut self, listener: F) -> &mut Self
    where
        F: Fn(Arc<Execution>, Arc<Settled>, PostNext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<PostDecision, HookError>> + Send + 'static,
    {
        self.post.push(Arc::new(move |exec, outcome, next| {
            Box::pin(listener(exec, outcome, next))
        }));
        self
    }

    /// Listener counts `(pre, post)`.
    pub fn len(&self) -> (usize, usize) {
        (self.pre.len(), self.post.len())
    }

    /// No listener at all.
    pub fn is_empty(&self) -> bool {
        self.pre.is_empty() && self.post.is_empty()
    }

    pub(crate) async fn pre_execute(&self, exec: Arc<Execution>) -> Result<PreDecision, HookError> {
        PreNext {
            chain: self.pre.clone().into(),
            index: 0,
            exec,
        }
        .run()
        .await
    }

    pub(crate) async fn post_execute(
        &self,
        exec: Arc<Execution>,
        outcome: Arc<Settled>,
    ) -> Result<PostDecision, HookError> {
        PostNext {
            chain: self.post.clone().into(),
            index: 0,
            exec,
            outcome,
        }
        .run()
        .await
    }
}

/// The rest of a `pre-execute` chain.
pub struct PreNext {
    chain: Arc<[Arc<PreFn>]>,
    index: usize,
    exec: Arc<Execution>,
}

impl PreNext {
    /// Hands over to the next listener and returns the chain's decision
    /// ([`PreDecision::Allow`] past the last listener).
    pub fn run(self) -> BoxFuture<'static, Result<PreDecision, HookError>> {
        Box::pin(async move {
            match self.chain.get(self.index).cloned() {
                None => Ok(PreDecision::Allow),
                Some(listener) => {
                    let next = PreNext {
                        chain: self.chain.clone(),
                        index: self.index + 1,
                        exec: self.exec.clone(),
                    };
                    listener(self.exec, next).await
                }
            }
        })
    }
}

/// The rest of a `post-execute` chain.
pub struct PostNext {
    chain: Arc<[Arc<PostFn>]>,
    index: usize,
    exec: Arc<Execution>,
    outcome: Arc<Settled>,
}

impl PostNext {
    /// Hands over to the next listener and returns the chain's decision
    /// ([`PostDecision::Pass`] past the last listener).
    pub fn run(self) -> BoxFuture<'static, Result<PostDecision, HookError>> {
        Box::pin(async move {
            match self.chain.get(self.index).cloned() {
                None => Ok(PostDecision::Pass),
                Some(listener) => {
                    let next = PostNext {
                        chain: self.chain.clone(),
                        index: self.index + 1,
                        exec: self.exec.clone(),
                        outcome: self.outcome.clone(),
                    };
                    listener(self.exec, self.outcome, next).await
                }
            }
        })
    }
}
