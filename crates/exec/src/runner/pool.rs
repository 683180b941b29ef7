//! The build pool of a corpus run: the compiled solutions of the pairs to evaluate are built
//! (or found in the build cache) on spare cores, in the order the lanes will reach them, while
//! the lanes evaluate. A lane that reaches a pair whose build is under way waits for it; one
//! whose build has not started builds it itself (the pool then skips it).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::engine::{BuildOutcome, ExecError};

/// Where one pair's build stands.
enum Slot {
    /// Not started: the first to ask (the pool or a lane) builds it.
    Queued,
    /// Being built by the pool.
    Building,
    /// Built by the pool: the outcome, until a lane takes it.
    Done(Box<BuildOutcome>),
    /// The pool could not build it (cancelled, its session failed): the lane builds it.
    Failed,
}

/// Builds shared between the pool's threads and the lanes, by pair index (into the run's
/// list of pairs to evaluate).
pub(super) struct BuildPool {
    slots: Mutex<HashMap<usize, Slot>>,
    done: Condvar,
    /// Pair indices in the order the pool builds them.
    order: Vec<usize>,
    next: Mutex<usize>,
}

/// How many builds run at once on this host: a quarter of its cores (each build's ninja runs
/// several compiler processes), at least one.
pub(super) fn pool_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    (cores / 4).max(1)
}

impl BuildPool {
    /// A pool for the pairs `order` (compiled solutions only), built in that order.
    pub(super) fn new(order: Vec<usize>) -> BuildPool {
        BuildPool {
            slots: Mutex::new(order.iter().map(|&k| (k, Slot::Queued)).collect()),
            done: Condvar::new(),
            order,
            next: Mutex::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A pool thread: builds queued pairs with `build` (a session's [`Session::build`]) until
    /// none is left.
    pub(super) fn work(&self, build: &mut dyn FnMut(usize) -> Result<BuildOutcome, ExecError>) {
        loop {
            let k = {
                let mut next = self
                    .next
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let mut slots = self.lock();
                let mut found = None;
                while let Some(&k) = self.order.get(*next) {
                    *next += 1;
                    if matches!(slots.get(&k), Some(Slot::Queued)) {
                        slots.insert(k, Slot::Building);
                        found = Some(k);
                        break;
                    }
                }
                match found {
                    Some(k) => k,
                    None => return,
                }
            };
            // Should the build panic, the slot is marked failed on the way out, so no lane
            // waits for it forever.
            let guard = FailOnUnwind { pool: self, k };
            let slot = match build(k) {
                Ok(outcome) => Slot::Done(Box::new(outcome)),
                Err(e) => {
                    if !matches!(e, ExecError::Cancelled) {
                        tracing::warn!("build pool: {e}; the lane builds it");
                    }
                    Slot::Failed
                }
            };
            std::mem::forget(guard);
            self.lock().insert(k, slot);
            self.done.notify_all();
        }
    }

    /// Whether pair `k`'s build is still to come (queued or under way): a lane that takes it
    /// now would wait for it.
    pub(super) fn pending(&self, k: usize) -> bool {
        matches!(self.lock().get(&k), Some(Slot::Queued | Slot::Building))
    }

    /// For a lane about to evaluate pair `k`: the pool's build (waiting while it is under
    /// way), with the time waited; `None` when the lane should build it itself.
    pub(super) fn take(&self, k: usize) -> Option<(BuildOutcome, Duration)> {
        let t = Instant::now();
        let mut slots = self.lock();
        loop {
            match slots.remove(&k) {
                None | Some(Slot::Failed) => return None,
                Some(Slot::Queued) => {
                    // Not started: the lane builds it now (and the pool will not).
                    slots.insert(k, Slot::Failed);
                    return None;
                }
                Some(Slot::Done(outcome)) => return Some((*outcome, t.elapsed())),
                Some(Slot::Building) => {
                    slots.insert(k, Slot::Building);
                    slots = self
                        .done
                        .wait(slots)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
        }
    }
}

/// Marks pair `k`'s build failed (the lane builds it) when dropped, i.e. when its build
/// unwinds; forgotten once the build returned.
struct FailOnUnwind<'a> {
    pool: &'a BuildPool,
    k: usize,
}

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        self.pool.lock().insert(self.k, Slot::Failed);
        self.pool.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kg_contract::Status;

    fn failed(k: usize) -> BuildOutcome {
        Err((Status::CompileError, format!("pair {k}")))
    }

    fn log_of(o: &BuildOutcome) -> String {
        match o {
            Err((_, log)) => log.clone(),
            Ok(_) => String::new(),
        }
    }

    #[test]
    fn the_pool_builds_in_order_and_a_lane_takes_each_build_once() {
        let pool = BuildPool::new(vec![4, 1, 7]);
        assert!(pool.pending(4), "queued is still to come");
        let mut built = Vec::new();
        pool.work(&mut |k| {
            built.push(k);
            Ok(failed(k))
        });
        assert_eq!(built, vec![4, 1, 7]);
        assert!(
            !pool.pending(4) && !pool.pending(9),
            "built, or not the pool's"
        );
        let (o, _) = pool.take(1).unwrap();
        assert_eq!(log_of(&o), "pair 1");
        assert!(pool.take(1).is_none(), "taken twice");
        assert!(pool.take(9).is_none(), "not the pool's");
    }

    #[test]
    fn a_lane_builds_what_the_pool_has_not_started_and_the_pool_skips_it() {
        let pool = BuildPool::new(vec![0, 1]);
        assert!(pool.take(1).is_none());
        let mut built = Vec::new();
        pool.work(&mut |k| {
            built.push(k);
            Ok(failed(k))
        });
        assert_eq!(built, vec![0]);
    }

    #[test]
    fn a_lane_waits_for_a_build_under_way_and_a_failed_pool_build_falls_to_the_lane() {
        let pool = BuildPool::new(vec![0, 1]);
        std::thread::scope(|s| {
            let (started_tx, started_rx) = std::sync::mpsc::channel();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let pool = &pool;
            s.spawn(move || {
                pool.work(&mut |k| {
                    if k == 0 {
                        let _ = started_tx.send(());
                        let _ = go_rx.recv();
                        Ok(failed(0))
                    } else {
                        Err(ExecError::Cancelled)
                    }
                });
            });
            started_rx.recv().unwrap();
            assert!(pool.pending(0), "under way is still to come");
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                let _ = go_tx.send(());
            });
            let (o, waited) = pool.take(0).unwrap();
            assert_eq!(log_of(&o), "pair 0");
            assert!(waited >= Duration::from_millis(40), "{waited:?}");
        });
        assert!(pool.take(1).is_none());
    }

    #[test]
    fn a_build_that_panics_never_leaves_a_lane_waiting() {
        let pool = BuildPool::new(vec![0]);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.work(&mut |_| panic!("builder bug"));
        }));
        assert!(r.is_err());
        assert!(pool.take(0).is_none());
    }
}
