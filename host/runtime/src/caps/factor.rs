//! The factor interface: how a capability plugs into the sandbox.
//!
//! A [`Factor`] is one capability (`llm`, `tools`, `http`, ...): it adds
//! its interface to the component linker once, when the [`Runtime`] is
//! built ([`RuntimeBuilder::factor`]), may bind a run's grant to the run
//! when the run starts ([`Factor::bind`]), and creates its state for each
//! store the run instantiates ([`Factor::instance_state`]). Its host
//! functions reach that state through the store's [`StoreData`]
//! ([`StoreData::factor_mut`]) and the run through its [`RunControl`]:
//! the grant ([`RunControl::grant`]), the call cap ([`RunControl::enter`]),
//! the usage meters ([`RunControl::usage`]), the journal
//! ([`RunControl::record`]), the deadlines and the byte budget.
//!
//! [`Runtime`]: crate::Runtime
//! [`RuntimeBuilder::factor`]: crate::RuntimeBuilder::factor

use std::any::{Any, TypeId};
use std::sync::Arc;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, ResourceTable};

use crate::caps::{Capabilities, Grant};
use crate::sandbox::{RunControl, StoreData};

/// One capability of the sandbox.
pub trait Factor: Send + Sync + 'static {
    /// The interface whose import makes a graph use the capability,
    /// without its version (`sandgraph:graph/llm`,
    /// `wasi:http/outgoing-handler`): what [`Graph::capabilities`] reads.
    ///
    /// [`Graph::capabilities`]: crate::Graph::capabilities
    const INTERFACE: &'static str;

    /// What a run is granted (and where its calls go), as
    /// [`Capabilities`] carries it.
    type Grant: Grant;

    /// The factor's state in one store (one instance).
    type InstanceState: Send + 'static;

    /// Adds the capability's functions to `linker` (once per runtime).
    ///
    /// # Errors
    ///
    /// What wasmtime says when an item cannot be defined.
    fn add_to_linker(&self, linker: &mut Linker<StoreData>) -> wasmtime::Result<()>;

    /// The grant as one run uses it, when it differs from the grant given
    /// (bound to state of the run). `caller`: the bound grant of the
    /// calling run, for a sub-run whose caller had one.
    fn bind(&self, grant: &Self::Grant, caller: Option<&Self::Grant>) -> Option<Self::Grant> {
        let _ = (grant, caller);
        None
    }

    /// The factor's state for a new store of the run `run`.
    fn instance_state(&self, run: &Arc<RunControl>) -> Self::InstanceState;
}

/// A registered factor, its types erased.
pub(crate) trait AnyFactor: Send + Sync {
    fn add_to_linker(&self, linker: &mut Linker<StoreData>) -> wasmtime::Result<()>;
    /// Binds the factor's grant in `caps`, if any.
    fn bind(&self, caps: &mut Capabilities, caller: Option<&Capabilities>);
    fn instance_state(&self, run: &Arc<RunControl>) -> (TypeId, Box<dyn Any + Send>);
    fn interface(&self) -> &'static str;
    fn capability(&self) -> &'static str;
}

impl<F: Factor> AnyFactor for F {
    fn add_to_linker(&self, linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
        Factor::add_to_linker(self, linker)
    }

    fn bind(&self, caps: &mut Capabilities, caller: Option<&Capabilities>) {
        let Some(grant) = caps.get::<F::Grant>() else {
            return;
        };
        let caller = caller.and_then(Capabilities::get::<F::Grant>);
        if let Some(bound) = Factor::bind(self, grant, caller) {
            caps.set(Some(bound));
        }
    }

    fn instance_state(&self, run: &Arc<RunControl>) -> (TypeId, Box<dyn Any + Send>) {
        (
            TypeId::of::<F>(),
            Box::new(Factor::instance_state(self, run)),
        )
    }

    fn interface(&self) -> &'static str {
        F::INTERFACE
    }

    fn capability(&self) -> &'static str {
        F::Grant::CAPABILITY
    }
}

/// The factors' states in one store, by factor type.
#[derive(Default)]
pub(crate) struct FactorStates(Vec<(TypeId, Box<dyn Any + Send>)>);

impl FactorStates {
    /// The states of every factor of `factors` for a new store of `run`.
    pub(crate) fn new(factors: &[Arc<dyn AnyFactor>], run: &Arc<RunControl>) -> Self {
        FactorStates(factors.iter().map(|f| f.instance_state(run)).collect())
    }

    fn get_mut<F: Factor>(&mut self) -> &mut F::InstanceState {
        self.0
            .iter_mut()
            .find(|(id, _)| *id == TypeId::of::<F>())
            .and_then(|(_, s)| s.downcast_mut::<F::InstanceState>())
            .unwrap_or_else(|| {
                panic!(
                    "factor {} is not registered with this runtime",
                    std::any::type_name::<F>()
                )
            })
    }
}

impl StoreData {
    /// The state of factor `F` in this store.
    ///
    /// # Panics
    ///
    /// When `F` is not registered with the runtime (its functions are then
    /// not in the linker either, so its own host calls never get here).
    pub fn factor_mut<F: Factor>(&mut self) -> &mut F::InstanceState {
        self.factors.get_mut::<F>()
    }

    /// The state of factor `F` with the store's resource table (shared
    /// with WASI's, as `wasi:http` needs).
    ///
    /// # Panics
    ///
    /// As [`StoreData::factor_mut`].
    pub fn factor_and_table<F: Factor>(&mut self) -> (&mut F::InstanceState, &mut ResourceTable) {
        (self.factors.get_mut::<F>(), &mut self.table)
    }
}

/// Runs `wait`, a host call of factor `F` that waits on something other
/// than the calling call's own code (a model), with the call's fuel given
/// back to its run meanwhile, so the run's other calls can use it; then
/// takes a new slice. Traps `out_of_fuel` when the budget is spent by then,
/// and is interrupted at the run's deadline or cancellation.
///
/// # Errors
///
/// The trap that ends the calling call.
pub async fn without_fuel<F: Factor, R>(
    store: &mut StoreContextMut<'_, StoreData>,
    wait: impl AsyncFnOnce(&mut F::InstanceState) -> R,
) -> wasmtime::Result<R> {
    let control = crate::sandbox::give_back_fuel(store)?;
    let out = wait(store.data_mut().factor_mut::<F>()).await;
    crate::sandbox::rearm_fuel(store, &control).await?;
    Ok(out)
}

/// [`without_fuel`] for a wait on a sub-run (a `tools` call): the calling
/// instance also lends its slot of the run to the sub-run, whose tasks
/// draw on the same slots, and takes one back before its guest runs
/// again.
///
/// # Errors
///
/// The trap that ends the calling call.
pub async fn lending_slot<F: Factor, R>(
    store: &mut StoreContextMut<'_, StoreData>,
    wait: impl AsyncFnOnce(&mut F::InstanceState) -> R,
) -> wasmtime::Result<R> {
    crate::sandbox::lending_slot(store, async |data: &mut StoreData| {
        wait(data.factor_mut::<F>()).await
    })
    .await
}
