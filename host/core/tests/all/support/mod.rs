//! A fake [`Backend`] whose workers run Rust closures, recording every call.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sandgraph_core::{
    Backend, ChannelSpec, ConditionalEdge, Edge, ErrorCode, GraphSpec, NodeContext, NodeOutput,
    NodeSpec, PathEntry, Reducer, Registration, RouteTarget, RunError, SendPacket, SharedJson,
    Worker,
};
use serde_json::{Map, Value};
use tokio::sync::Barrier;

pub type NodeFn = Arc<dyn Fn(&Value, &NodeContext) -> Result<NodeOutput, RunError> + Send + Sync>;
pub type RouterFn = Arc<dyn Fn(&Value) -> Result<Vec<RouteTarget>, RunError> + Send + Sync>;
pub type ReduceFn = Arc<dyn Fn(&Value, &Value) -> Result<Value, RunError> + Send + Sync>;

/// One recorded call; `worker` is the id of the worker that made it (0 is the
/// first worker the run asked for, its main worker).
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    NodeStart {
        node: String,
        input: Value,
        step: u32,
        worker: usize,
    },
    NodeEnd {
        node: String,
        worker: usize,
    },
    Route {
        router: String,
        state: Value,
        worker: usize,
    },
    Reduce {
        channel: String,
        current: Value,
        update: Value,
        worker: usize,
    },
}

#[derive(Clone)]
struct NodeBehaviour {
    body: NodeFn,
    delay: Duration,
    barrier: Option<Arc<Barrier>>,
}

#[derive(Default)]
struct Inner {
    nodes: HashMap<String, NodeBehaviour>,
    routers: HashMap<String, RouterFn>,
    reducers: HashMap<String, ReduceFn>,
    /// `check_continue` fails from this call on (0-based).
    stop_at_check: Option<usize>,
    checks: AtomicUsize,
    workers: AtomicUsize,
    /// JSON texts made of node and router inputs.
    texts: AtomicUsize,
    log: Mutex<Vec<Call>>,
}

impl Inner {
    fn record(&self, call: Call) {
        lock(&self.log).push(call);
    }

    /// Asks for `input`'s text as a real worker does, counting the texts
    /// made.
    fn text_of(&self, input: &SharedJson) -> Result<(), RunError> {
        input.text(|value| {
            self.texts.fetch_add(1, Ordering::SeqCst);
            Ok::<_, RunError>((value.to_string(), Box::new(())))
        })?;
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Builds a [`FakeBackend`].
#[derive(Default)]
pub struct Fake {
    inner: Inner,
}

impl Fake {
    pub fn new() -> Self {
        Fake::default()
    }

    /// A node running `body`.
    pub fn node(
        self,
        name: &str,
        body: impl Fn(&Value, &NodeContext) -> Result<NodeOutput, RunError> + Send + Sync + 'static,
    ) -> Self {
        self.node_with(name, Duration::ZERO, None, body)
    }

    /// A node that sleeps `delay` before running `body`.
    pub fn slow_node(
        self,
        name: &str,
        delay: Duration,
        body: impl Fn(&Value, &NodeContext) -> Result<NodeOutput, RunError> + Send + Sync + 'static,
    ) -> Self {
        self.node_with(name, delay, None, body)
    }

    /// A node that waits on `barrier` before running `body`: the run only
    /// completes if all of the barrier's parties run concurrently.
    pub fn barrier_node(
        self,
        name: &str,
        barrier: &Arc<Barrier>,
        body: impl Fn(&Value, &NodeContext) -> Result<NodeOutput, RunError> + Send + Sync + 'static,
    ) -> Self {
        self.node_with(name, Duration::ZERO, Some(Arc::clone(barrier)), body)
    }

    fn node_with(
        mut self,
        name: &str,
        delay: Duration,
        barrier: Option<Arc<Barrier>>,
        body: impl Fn(&Value, &NodeContext) -> Result<NodeOutput, RunError> + Send + Sync + 'static,
    ) -> Self {
        let behaviour = NodeBehaviour {
            body: Arc::new(body),
            delay,
            barrier,
        };
        self.inner.nodes.insert(name.to_owned(), behaviour);
        self
    }

    pub fn router(
        mut self,
        name: &str,
        body: impl Fn(&Value) -> Result<Vec<RouteTarget>, RunError> + Send + Sync + 'static,
    ) -> Self {
        self.inner.routers.insert(name.to_owned(), Arc::new(body));
        self
    }

    pub fn reducer(
        mut self,
        channel: &str,
        body: impl Fn(&Value, &Value) -> Result<Value, RunError> + Send + Sync + 'static,
    ) -> Self {
        self.inner
            .reducers
            .insert(channel.to_owned(), Arc::new(body));
        self
    }

    /// `check_continue` succeeds `n` times, then fails with `timeout`.
    pub fn stop_after_checks(mut self, n: usize) -> Self {
        self.inner.stop_at_check = Some(n);
        self
    }

    pub fn build(self) -> Arc<FakeBackend> {
        Arc::new(FakeBackend {
            inner: Arc::new(self.inner),
        })
    }
}

pub struct FakeBackend {
    inner: Arc<Inner>,
}

impl FakeBackend {
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.inner.log).clone()
    }

    /// Nodes in the order they started, with the step each ran in.
    pub fn node_runs(&self) -> Vec<(String, u32)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::NodeStart { node, step, .. } => Some((node, step)),
                _ => None,
            })
            .collect()
    }

    /// Inputs node `name` saw, in start order.
    pub fn inputs_of(&self, name: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::NodeStart { node, input, .. } if node == name => Some(input),
                _ => None,
            })
            .collect()
    }

    /// JSON texts made of node and router inputs so far.
    pub fn texts_made(&self) -> usize {
        self.inner.texts.load(Ordering::SeqCst)
    }

    pub fn workers_created(&self) -> usize {
        self.inner.workers.load(Ordering::SeqCst)
    }

    pub fn checks(&self) -> usize {
        self.inner.checks.load(Ordering::SeqCst)
    }
}

pub struct FakeWorker {
    id: usize,
    inner: Arc<Inner>,
}

impl Backend for FakeBackend {
    type Worker = FakeWorker;

    async fn worker(&self) -> Result<FakeWorker, RunError> {
        let id = self.inner.workers.fetch_add(1, Ordering::SeqCst);
        Ok(FakeWorker {
            id,
            inner: Arc::clone(&self.inner),
        })
    }

    fn check_continue(&self) -> Result<(), RunError> {
        let n = self.inner.checks.fetch_add(1, Ordering::SeqCst);
        match self.inner.stop_at_check {
            Some(stop) if n >= stop => {
                Err(RunError::new(ErrorCode::Timeout, "soft deadline passed"))
            }
            _ => Ok(()),
        }
    }
}

fn unknown(what: &str, name: &str) -> RunError {
    RunError::new(
        ErrorCode::NodeError,
        format!("fake: unknown {what} {name:?}"),
    )
}

impl Worker for FakeWorker {
    async fn run_node(
        &mut self,
        node: &str,
        input: &SharedJson,
        ctx: &NodeContext,
    ) -> Result<NodeOutput, RunError> {
        self.inner.text_of(input)?;
        let input = input.value();
        self.inner.record(Call::NodeStart {
            node: node.to_owned(),
            input: input.clone(),
            step: ctx.step,
            worker: self.id,
        });
        let behaviour = self
            .inner
            .nodes
            .get(node)
            .cloned()
            .ok_or_else(|| unknown("node", node))?;
        if let Some(barrier) = &behaviour.barrier {
            barrier.wait().await;
        }
        if !behaviour.delay.is_zero() {
            tokio::time::sleep(behaviour.delay).await;
        }
        let out = (behaviour.body)(input, ctx);
        self.inner.record(Call::NodeEnd {
            node: node.to_owned(),
            worker: self.id,
        });
        out
    }

    async fn route(
        &mut self,
        router: &str,
        state: &SharedJson,
    ) -> Result<Vec<RouteTarget>, RunError> {
        self.inner.text_of(state)?;
        let state = state.value();
        self.inner.record(Call::Route {
            router: router.to_owned(),
            state: state.clone(),
            worker: self.id,
        });
        let body = self
            .inner
            .routers
            .get(router)
            .cloned()
            .ok_or_else(|| unknown("router", router))?;
        body(state)
    }

    async fn reduce(
        &mut self,
        channel: &str,
        current: &Value,
        update: &Value,
    ) -> Result<Value, RunError> {
        self.inner.record(Call::Reduce {
            channel: channel.to_owned(),
            current: current.clone(),
            update: update.clone(),
            worker: self.id,
        });
        let body = self
            .inner
            .reducers
            .get(channel)
            .cloned()
            .ok_or_else(|| unknown("reducer", channel))?;
        body(current, update)
    }
}

// ---- node output helpers ----

pub fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// A plain update.
pub fn update(value: Value) -> Result<NodeOutput, RunError> {
    Ok(NodeOutput::Update(object(value)))
}

pub fn command(
    value: Value,
    goto: &[&str],
    sends: Vec<SendPacket>,
) -> Result<NodeOutput, RunError> {
    Ok(NodeOutput::Command {
        update: object(value),
        goto: goto.iter().map(|s| (*s).to_owned()).collect(),
        sends,
    })
}

pub fn send(node: &str, payload: Value) -> SendPacket {
    SendPacket {
        node: node.to_owned(),
        payload,
    }
}

pub fn to(node: &str) -> RouteTarget {
    RouteTarget::Node(node.to_owned())
}

// ---- spec builder ----

/// Builds a [`GraphSpec`] tersely.
pub struct SpecBuilder {
    spec: GraphSpec,
}

pub fn graph(nodes: &[&str]) -> SpecBuilder {
    SpecBuilder {
        spec: GraphSpec {
            name: "test-graph".to_owned(),
            description: None,
            registration: Registration::default(),
            parameters: None,
            timeout_ms: None,
            channels: Vec::new(),
            nodes: nodes
                .iter()
                .map(|n| NodeSpec {
                    name: (*n).to_owned(),
                    description: None,
                })
                .collect(),
            edges: Vec::new(),
            conditional_edges: Vec::new(),
            entry_points: Vec::new(),
            finish_points: Vec::new(),
            strict: false,
        },
    }
}

impl SpecBuilder {
    pub fn channel(mut self, name: &str, reducer: Reducer) -> Self {
        self.spec.channels.push(ChannelSpec {
            name: name.to_owned(),
            reducer,
            default: None,
        });
        self
    }

    pub fn channel_default(mut self, name: &str, reducer: Reducer, default: Value) -> Self {
        self.spec.channels.push(ChannelSpec {
            name: name.to_owned(),
            reducer,
            default: Some(default),
        });
        self
    }

    pub fn entry(mut self, node: &str) -> Self {
        self.spec.entry_points.push(node.to_owned());
        self
    }

    pub fn finish(mut self, node: &str) -> Self {
        self.spec.finish_points.push(node.to_owned());
        self
    }

    pub fn edge(self, source: &str, target: &str) -> Self {
        self.join(&[source], target)
    }

    pub fn join(mut self, sources: &[&str], target: &str) -> Self {
        self.spec.edges.push(Edge {
            sources: sources.iter().map(|s| (*s).to_owned()).collect(),
            target: target.to_owned(),
        });
        self
    }

    /// A conditional edge; an empty `path_map` means answers are node names.
    pub fn cond(mut self, source: &str, router: &str, path_map: &[(&str, &str)]) -> Self {
        self.spec.conditional_edges.push(ConditionalEdge {
            source: source.to_owned(),
            router: router.to_owned(),
            path_map: path_map
                .iter()
                .map(|(key, target)| PathEntry {
                    key: (*key).to_owned(),
                    target: (*target).to_owned(),
                })
                .collect(),
        });
        self
    }

    pub fn strict(mut self) -> Self {
        self.spec.strict = true;
        self
    }

    pub fn build(self) -> GraphSpec {
        self.spec
    }
}
