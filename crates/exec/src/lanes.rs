//! Lanes: one corpus run spread over several devices (every claimed GPU of a host, or CPU
//! cores), one [`crate::Session`] (judge and candidate workers) per lane.
//!
//! A [`Lane`] is a device and what its workers need to use it (the claim's device visibility,
//! its L2 lock, its evidence for the traces). [`Schedule`] hands the pairs of a run to lanes:
//! with several lanes the most expensive pairs go first, dealt to the lane with the least work
//! so far, and a lane that runs out takes the cheapest pair still waiting on the busiest
//! other lane. Each lane knows the pairs it will most likely take next, so it can start their
//! candidate processes ahead of time.
//!
//! Lanes run candidates side by side, so several lanes are used only where each candidate is
//! confined to its own PID namespace and read-only view (the layers that keep one candidate
//! from reaching another; [`crate::runner::CorpusRunner`] checks them on a probe process
//! before a second lane starts). One timed workload per device at a time: each GPU lane holds
//! its own claim's L2 execution lock around its workloads, as a single-lane run does.

use std::collections::VecDeque;
use std::sync::Mutex;

use kg_contract::GpuClaim;

use crate::DeviceChoice;
use crate::engine::EvalOptions;

/// One device lane of a corpus run.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    /// The device its workers use (a claimed GPU is index 0 in their view).
    pub device: DeviceChoice,
    /// Extra environment for its workers (a claim's device visibility and L2 lock).
    pub worker_env: Vec<(String, String)>,
    /// The claim holding its GPU, recorded in every trace it writes.
    pub gpu_claim: Option<GpuClaim>,
}

impl Lane {
    /// The lane that `opts` describe (a single-lane run).
    pub fn of(opts: &EvalOptions) -> Lane {
        Lane {
            device: opts.device.clone(),
            worker_env: opts.worker_env.clone(),
            gpu_claim: opts.gpu_claim.clone(),
        }
    }

    /// `opts` with this lane's device, environment and claim.
    pub fn options(&self, opts: &EvalOptions) -> EvalOptions {
        let mut o = opts.clone();
        o.device = self.device.clone();
        o.worker_env.clone_from(&self.worker_env);
        o.gpu_claim.clone_from(&self.gpu_claim);
        o
    }

    /// How people see it: the claimed GPU's UUID (its workers call it index 0), else the
    /// device.
    pub fn label(&self) -> String {
        match &self.gpu_claim {
            Some(c) => c.uuid.clone(),
            None => self.device.to_string(),
        }
    }
}

/// Which lane evaluates which pair, and in what order. Pairs are indices into the run's list
/// of pairs to evaluate; costs are in any unit, only their order and sums matter.
#[derive(Debug)]
pub struct Schedule {
    queues: Mutex<Vec<VecDeque<usize>>>,
    costs: Vec<f64>,
}

impl Schedule {
    /// Deals pairs `0..costs.len()` to `lanes` lanes. One lane keeps the run's order; several
    /// take the most expensive first, each pair going to the lane with the least cost dealt
    /// so far (ties: the lower lane).
    pub fn new(costs: Vec<f64>, lanes: usize) -> Schedule {
        let lanes = lanes.max(1);
        let mut queues = vec![VecDeque::new(); lanes];
        if lanes == 1 {
            queues[0].extend(0..costs.len());
        } else {
            let mut order: Vec<usize> = (0..costs.len()).collect();
            // Stable: equal costs keep the run's order.
            order.sort_by(|&a, &b| costs[b].total_cmp(&costs[a]));
            let mut load = vec![0.0_f64; lanes];
            for k in order {
                let lane = (0..lanes)
                    .min_by(|&a, &b| load[a].total_cmp(&load[b]))
                    .unwrap_or(0);
                load[lane] += costs[k];
                queues[lane].push_back(k);
            }
        }
        Schedule {
            queues: Mutex::new(queues),
            costs,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<VecDeque<usize>>> {
        // A lane that panicked holding the lock left the queues consistent (each operation
        // is one push or pop).
        self.queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The next pair for `lane`: the first of its own, else the cheapest still waiting on the
    /// other lane with the most cost left; `None` when every queue is empty.
    pub fn next(&self, lane: usize) -> Option<usize> {
        self.next_ready(lane, |_| true)
    }

    /// As [`Schedule::next`], but passing over pairs that are not `ready` (e.g. whose build is
    /// still under way) for the first that is, so a lane evaluates something else while a
    /// build runs; where none is ready, the one `next` would give (the lane waits for it).
    pub fn next_ready(&self, lane: usize, ready: impl Fn(usize) -> bool) -> Option<usize> {
        let mut q = self.lock();
        if let Some(own) = q.get_mut(lane)
            && !own.is_empty()
        {
            let at = own.iter().position(|&k| ready(k)).unwrap_or(0);
            return own.remove(at);
        }
        let left = |d: &VecDeque<usize>| d.iter().map(|&k| self.costs[k]).sum::<f64>();
        let busiest = (0..q.len())
            .filter(|&l| l != lane && !q[l].is_empty())
            .max_by(|&a, &b| left(&q[a]).total_cmp(&left(&q[b])))?;
        let theirs = &mut q[busiest];
        let at = theirs
            .iter()
            .rposition(|&k| ready(k))
            .unwrap_or(theirs.len() - 1);
        theirs.remove(at)
    }

    /// Up to `n` pairs `lane` is due to take next (its own queue, in order).
    pub fn upcoming(&self, lane: usize, n: usize) -> Vec<usize> {
        self.lock()
            .get(lane)
            .map(|d| d.iter().take(n).copied().collect())
            .unwrap_or_default()
    }

    /// Every waiting pair in the order the lanes will most likely reach them: each lane's
    /// first, then each lane's second, and so on.
    pub fn order(&self) -> Vec<usize> {
        let q = self.lock();
        let longest = q.iter().map(VecDeque::len).max().unwrap_or(0);
        (0..longest)
            .flat_map(|i| q.iter().filter_map(move |d| d.get(i).copied()))
            .collect()
    }

    /// Removes every waiting pair for which `drop` holds (e.g. those of a problem that changed).
    pub fn remove(&self, drop: impl Fn(usize) -> bool) {
        for d in self.lock().iter_mut() {
            d.retain(|&k| !drop(k));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(s: &Schedule, lane: usize) -> Vec<usize> {
        std::iter::from_fn(|| s.next(lane)).collect()
    }

    fn drain_n(s: &Schedule, lane: usize, n: usize) -> Vec<usize> {
        (0..n).filter_map(|_| s.next(lane)).collect()
    }

    #[test]
    fn one_lane_keeps_the_run_order() {
        let s = Schedule::new(vec![1.0, 9.0, 3.0], 1);
        assert_eq!(s.upcoming(0, 8), vec![0, 1, 2]);
        assert_eq!(drain(&s, 0), vec![0, 1, 2]);
    }

    #[test]
    fn several_lanes_take_the_longest_first_balanced() {
        // By cost 9, 7, 5, 4, 3, 1, each to the lane with less so far: lane 0 gets 9, 4, 1
        // (14), lane 1 gets 7, 5, 3 (15).
        let s = Schedule::new(vec![4.0, 9.0, 1.0, 7.0, 3.0, 5.0], 2);
        assert_eq!(s.upcoming(0, 8), vec![1, 0, 2]);
        assert_eq!(s.upcoming(1, 8), vec![3, 5, 4]);
        assert_eq!(s.order(), vec![1, 3, 0, 5, 2, 4]);
        assert_eq!(drain_n(&s, 1, 3), vec![3, 5, 4]);
        // Lane 1 ran out: it takes the cheapest pair still waiting on lane 0.
        assert_eq!(s.next(1), Some(2));
        assert_eq!(drain(&s, 0), vec![1, 0]);
        assert_eq!(s.next(0), None);
        assert_eq!(s.next(1), None);
    }

    #[test]
    fn a_lane_passes_over_pairs_not_ready_and_waits_only_when_none_is() {
        // Pairs 0 and 1 wait for their builds; one lane keeps the run's order otherwise.
        let building = std::cell::RefCell::new(vec![0, 1]);
        let ready = |k: usize| !building.borrow().contains(&k);
        let s = Schedule::new(vec![1.0; 4], 1);
        assert_eq!(s.next_ready(0, ready), Some(2));
        // Pair 0's build finished meanwhile: it comes before pair 3 again.
        building.borrow_mut().retain(|&k| k != 0);
        assert_eq!(s.next_ready(0, ready), Some(0));
        assert_eq!(s.next_ready(0, ready), Some(3));
        // Only pair 1 is left, still building: the lane takes it (and will wait for it).
        assert_eq!(s.next_ready(0, ready), Some(1));
        assert_eq!(s.next_ready(0, ready), None);
    }

    #[test]
    fn a_lane_that_ran_out_takes_a_ready_pair_from_the_busiest_lane() {
        // By cost 9, 7, 5, 4, 3, each to the lane with less so far: lane 0 gets 9 and 4, lane 1
        // gets 7, 5 and 3.
        let s = Schedule::new(vec![4.0, 9.0, 7.0, 5.0, 3.0], 2);
        assert_eq!(s.upcoming(1, 8), vec![2, 3, 4]);
        assert_eq!(drain_n(&s, 0, 2), vec![1, 0]);
        // Lane 1's cheapest waiting pair (4) is not ready: lane 0 takes the next cheapest.
        assert_eq!(s.next_ready(0, |k| k != 4), Some(3));
        assert_eq!(s.next_ready(0, |_| false), Some(4));
        assert_eq!(drain(&s, 1), vec![2]);
    }

    #[test]
    fn every_pair_is_handed_out_once() {
        let costs: Vec<f64> = (0..40).map(|k| f64::from((k * 7919) % 13)).collect();
        let s = Schedule::new(costs, 3);
        s.remove(|k| k == 5);
        let mut got = Vec::new();
        let mut lane = 0;
        while let Some(k) = s.next(lane) {
            got.push(k);
            lane = (lane + 1) % 3;
        }
        got.sort_unstable();
        let want: Vec<usize> = (0..40).filter(|&k| k != 5).collect();
        assert_eq!(got, want);
    }
}
