//! Components and modules that fail. A component whose `open` fails (or
//! panics), and a module whose setup calls fail, are left out at setup; a
//! module whose `progress` fails later is closed and the peers it served
//! are routed over the next module that reaches them. An include list
//! (`FIREOPAL_BTL=a,b`) keeps its meaning: a failure of a component it
//! names at setup is an error.
//!
//! A closed module is never called again. It is not dropped before the
//! messenger is, and not at all after a panic: its state may be broken,
//! and its `Drop` runs outside the panic firewall (a panic there aborts).
//! Its peers are not told: traffic a peer still sends through the same
//! transport to this rank is not read, so a runtime that must go on has
//! its own way to notice (the peer's sends over that transport never
//! complete, or the transport fails there too).

use std::collections::HashSet;

use fireopal_abi::btl::{BtlModuleBox, Rank};
use fireopal_abi::host::{Host, LogLevel};
use fireopal_abi::{ErrorKind, PluginError};

use super::{complete_part, replay, InitError, Messenger, ModuleSlot, PeerFailure, SendError};
use crate::plugin::{Framework, OpenError, Registry};

/// A component or module left out at setup.
pub(super) struct Disabled {
    component: String,
    /// The module's index; `None` when the component's `open` failed.
    index: Option<usize>,
    /// The call that failed.
    call: &'static str,
    error: PluginError,
}

/// The modules that came through setup, their addresses, and what was
/// left out.
pub(super) struct Opened {
    pub(super) slots: Vec<ModuleSlot>,
    pub(super) addresses: Vec<Vec<u8>>,
    pub(super) disabled: Vec<Disabled>,
}

/// Whether a module that answered `error` may have broken state.
fn panicked(error: &PluginError) -> bool {
    error.kind == ErrorKind::PANICKED || error.kind == ErrorKind::POISONED
}

/// Lets go of a module that failed: dropped, unless it panicked (then its
/// `Drop` could panic too, which aborts the process).
fn discard(module: BtlModuleBox, error: &PluginError) {
    if panicked(error) {
        std::mem::forget(module);
    }
}

/// Opens every selected BTL and reads each module's attributes and
/// address. What fails is left out, unless an include list names it.
pub(super) fn open_modules(registry: &Registry) -> Result<Opened, InitError> {
    let opened = registry.open_btls().map_err(InitError::Open)?;
    let mut disabled: Vec<Disabled> = opened
        .disabled
        .into_iter()
        .filter_map(|e| match e {
            OpenError::Failed { name, error } => Some(Disabled {
                component: name,
                index: None,
                call: "open",
                error,
            }),
            _ => None,
        })
        .collect();
    let mut slots = Vec::new();
    let mut addresses = Vec::new();
    for (name, modules) in opened.modules {
        for (index, module) in modules.into_iter().enumerate() {
            let setup = match module.attributes().into_result() {
                Ok(attrs) => match module.address().into_result() {
                    Ok(address) => Ok((attrs, address.into_vec())),
                    Err(e) => Err(("address", e)),
                },
                Err(e) => Err(("attributes", e)),
            };
            match setup {
                Ok((attrs, address)) => {
                    slots.push(ModuleSlot {
                        component: name.clone(),
                        index,
                        module,
                        attrs,
                        remote: false,
                        active: true,
                        closed: None,
                    });
                    addresses.push(address);
                }
                Err((_, error)) if registry.is_required(Framework::Btl, &name) => {
                    discard(module, &error);
                    return Err(InitError::Module {
                        component: name,
                        error,
                    });
                }
                Err((call, error)) => {
                    discard(module, &error);
                    disabled.push(Disabled {
                        component: name.clone(),
                        index: Some(index),
                        call,
                        error,
                    });
                }
            }
        }
    }
    Ok(Opened {
        slots,
        addresses,
        disabled,
    })
}

/// Logs what setup left out, once per rank: rank 0 speaks for the job at
/// warn level; another rank warns only when rank 0 published the
/// component (so its failure is this rank's own), and logs at debug level
/// otherwise.
pub(super) fn report_disabled(
    log: &Host,
    rank: Rank,
    disabled: &[Disabled],
    rank0_components: &HashSet<String>,
) {
    for d in disabled {
        let level = if rank == 0 || rank0_components.contains(&d.component) {
            LogLevel::Warn
        } else {
            LogLevel::Debug
        };
        let what = match d.index {
            None => format!("component {:?}", d.component),
            Some(i) => format!("module {}[{i}]", d.component),
        };
        log.log(
            level,
            &format!(
                "{what} disabled: {} failed: {}; the job goes on without it",
                d.call, d.error
            ),
        );
    }
}

/// Logs a module closed because `add_peers` failed.
pub(super) fn report_setup_failure(log: &Host, component: &str, index: usize, error: &PluginError) {
    log.log(
        LogLevel::Warn,
        &format!("module {component}[{index}] closed: add_peers failed: {error}"),
    );
}

/// The modules of `candidates` (sorted best first) that carry traffic:
/// those of the highest exclusivity among the ones not closed.
pub(super) fn best_tier(slots: &[ModuleSlot], candidates: &[usize]) -> Vec<usize> {
    let open = |i: &usize| slots.get(*i).is_some_and(|s| s.closed.is_none());
    let best = candidates
        .iter()
        .find(|i| open(i))
        .and_then(|&i| slots.get(i))
        .map(|s| s.attrs.exclusivity);
    candidates
        .iter()
        .copied()
        .filter(|i| open(i) && slots.get(*i).map(|s| s.attrs.exclusivity) == best)
        .collect()
}

impl Messenger {
    /// Closes module `i` after `error`: it is never called again, its
    /// pending operations complete with the error, and every peer it
    /// served goes over the next module that reaches it, or fails.
    #[inline(never)]
    pub(super) fn close_module(&mut self, i: usize, error: PluginError) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        if slot.closed.is_some() {
            return;
        }
        slot.closed = Some(error.clone());
        let (component, index) = (slot.component.clone(), slot.index);
        let closed = SendError::Closed {
            component: component.clone(),
            error: error.clone(),
        };

        self.shared.reassembly.retain(|&(m, _), _| m != i);

        let mut now_used = Vec::new();
        let mut lost = 0usize;
        let mut rerouted = Vec::new();
        let mut replayed = Vec::new();
        for (peer, route) in self.shared.routes.iter_mut().enumerate() {
            if !route.modules.contains(&i) {
                continue;
            }
            let peer = Rank::try_from(peer).unwrap_or(Rank::MAX);
            route.modules = best_tier(&self.slots, &route.candidates);
            let failure = match route.modules.first() {
                Some(&j) if !route.sequenced => {
                    rerouted.push((peer, j));
                    if peer != self.rank {
                        now_used.extend(route.modules.iter().copied());
                    }
                    continue;
                }
                // A sequenced route goes on over its other lanes, which
                // carry again what this one may have taken (`replay`).
                Some(_) => {
                    if route.failed.is_none() {
                        replayed.push(peer);
                    }
                    continue;
                }
                None => PeerFailure::NoTransport {
                    component: component.clone(),
                    index,
                    error: error.clone(),
                },
            };
            lost += 1;
            if route.failed.is_none() {
                route.failed = Some(Box::new(failure.clone()));
                self.shared.failure_epoch += 1;
                self.shared.failures.push((peer, failure));
            }
        }

        // Sends whose copy goes again on another lane are not failed, nor
        // RDMA pieces that go again on another.
        let cookies: Vec<u64> = self
            .shared
            .cookies
            .iter()
            .filter(|(_, &(_, m))| m == i)
            .map(|(&c, _)| c)
            .collect();
        let (mut failed_ops, mut carried_on) = (0usize, 0usize);
        for cookie in cookies {
            if let Some(piece) = self.shared.lane_state.rdma_pieces.remove(&cookie) {
                self.shared.cookies.remove(&cookie);
                self.retry_piece(piece, i, closed.clone());
                carried_on += 1;
                continue;
            }
            if let Some((id, _)) = self.shared.cookies.remove(&cookie) {
                let status = if replay::replaces(&self.shared.routes, id) {
                    carried_on += 1;
                    Ok(())
                } else {
                    failed_ops += 1;
                    Err(closed.clone())
                };
                complete_part(
                    &mut self.shared.outstanding,
                    &mut self.shared.completions,
                    id,
                    status,
                );
            }
        }
        let lanes_lost = replayed.len();
        for peer in replayed {
            self.lane_lost(peer, i, error.clone());
        }
        for j in now_used {
            if let Some(s) = self.slots.get_mut(j) {
                s.remote = true;
                s.active = true;
            }
        }
        self.log.log(
            LogLevel::Warn,
            &format!(
                "module {component}[{index}] closed: progress failed: {error}; \
                 {failed_ops} pending operations on it failed, {} peers rerouted, \
                 {lost} left without a transport; {carried_on} operations and {lanes_lost} \
                 peers go on over other lanes",
                rerouted.len()
            ),
        );
        for (peer, j) in rerouted {
            if let Some(s) = self.slots.get(j) {
                self.log.log(
                    LogLevel::Debug,
                    &format!("rank {peer} now via {}[{}]", s.component, s.index),
                );
            }
        }
    }

    /// Modules closed after a failure, as `(component, index, error)`.
    pub fn closed_modules(&self) -> Vec<(&str, usize, &PluginError)> {
        self.slots
            .iter()
            .filter_map(|s| Some((s.component.as_str(), s.index, s.closed.as_ref()?)))
            .collect()
    }
}

impl Drop for Messenger {
    fn drop(&mut self) {
        // A module that panicked is not dropped (see the module docs).
        for slot in self.slots.drain(..) {
            match slot.closed {
                Some(ref error) if panicked(error) => std::mem::forget(slot.module),
                _ => drop(slot),
            }
        }
    }
}
