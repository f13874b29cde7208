//! What a simulated agent's process monitor and vitals report: each job's process in the
//! state the agent is in, and machine figures drawn from the seed and the instance, so
//! that `bosh instances --ps` and `bosh vms --vitals` read a simulated VM as a real one.

use super::draw;
use super::mirror::AgentRecord;
use crate::agent::{JobState, Process, Vitals};

/// A figure in `[low, high)` for `what` on this agent's instance, with one decimal.
fn figure(seed: u64, agent: &AgentRecord, what: &str, low: f64, high: f64) -> f64 {
    let n = draw(
        seed,
        &format!("vitals/{}/{}/{what}", agent.deployment, agent.instance),
    );
    ((low + n * (high - low)) * 10.0).round() / 10.0
}

fn text(value: f64) -> String {
    format!("{value:.1}")
}

/// The monitored processes: one per job of the applied spec.
pub(super) fn processes(seed: u64, agent: &AgentRecord, now: u64) -> Vec<Process> {
    let Some(applied) = &agent.applied else {
        return Vec::new();
    };
    let state = agent.job_state.as_str();
    let uptime = agent.started_at.map(|at| now.saturating_sub(at));
    applied
        .jobs
        .iter()
        .map(|job| {
            let running = agent.job_state == JobState::Running;
            Process {
                name: job.clone(),
                state: state.to_string(),
                uptime_secs: uptime.filter(|_| running),
                mem_kb: running.then(|| {
                    figure(seed, agent, &format!("{job}/mem"), 20_000.0, 400_000.0) as u64
                }),
                mem_percent: running
                    .then(|| figure(seed, agent, &format!("{job}/mem%"), 0.5, 12.0)),
                cpu_total: running.then(|| figure(seed, agent, &format!("{job}/cpu"), 0.0, 8.0)),
            }
        })
        .collect()
}

/// The machine's figures; a persistent disk is listed while one is mounted.
pub(super) fn vitals(seed: u64, agent: &AgentRecord, now: u64) -> Vitals {
    let f = |what: &str, low: f64, high: f64| figure(seed, agent, what, low, high);
    let mut disks = vec![
        (
            "system".to_string(),
            text(f("disk/system", 30.0, 60.0)),
            text(f("inodes/system", 20.0, 40.0)),
        ),
        (
            "ephemeral".to_string(),
            text(f("disk/ephemeral", 1.0, 20.0)),
            text(f("inodes/ephemeral", 0.0, 5.0)),
        ),
    ];
    if !agent.disks.is_empty() {
        disks.push((
            "persistent".to_string(),
            text(f("disk/persistent", 1.0, 60.0)),
            text(f("inodes/persistent", 0.0, 5.0)),
        ));
    }
    let load = f("load", 0.0, 2.0);
    Vitals {
        load: [text(load), text(load * 0.9), text(load * 0.8)],
        cpu_sys: text(f("cpu/sys", 0.0, 5.0)),
        cpu_user: text(f("cpu/user", 0.0, 20.0)),
        cpu_wait: text(f("cpu/wait", 0.0, 2.0)),
        mem_kb: (f("mem", 300_000.0, 3_000_000.0) as u64).to_string(),
        mem_percent: text(f("mem%", 5.0, 60.0)),
        swap_kb: "0".to_string(),
        swap_percent: "0.0".to_string(),
        uptime_secs: agent.created_at.map(|at| now.saturating_sub(at)),
        disks,
    }
}
