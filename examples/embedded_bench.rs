//! Prints the embedded fleet's figures; run with `cargo run --release --example embedded_bench`
//! (followed by `a`, `b` or `c` for some of them).
//!
//! Followed by `statements` too, each run's SQLite statements that took longest follow
//! its figures: where the time goes, when a figure grows.
//!
//! Both rollouts run the real director, broker and SQLite store in a temporary state
//! directory, with every simulated latency at zero. Waits that are policy, not work (watch
//! times, poll and retry intervals) elapse in virtual time, so the wall time measured is
//! what the embedded fleet itself costs.
//! (a) the demo fleet (30 instances): provisioning and the update run; target under 1 s.
//! (b) 1,000 instances (600 single-VM, 400 three-node clusters): target under 10 s.
//! (c) 10,000 instances (6,000 single-VM, 4,000 three-node clusters, 18,000 VMs on a /12):
//!     target under 40 s, and at most 12 times (b): the cost grows with the fleet, not
//!     with the fleet times its task history. Then the cloud config is edited (every VM
//!     outdated) and the fleet updated again on the same state, twice: the second of these
//!     does the first's work on a history half as long again, and takes at most a tenth
//!     longer.

// Wall time is what this measures, so it reads the real clock.
#![allow(clippy::disallowed_types)]

#[path = "shared/fleet_run.rs"]
mod fleet_run;

use fleet_updater::fleet::{DEMO, Definition};
use fleet_updater::store::StoreLocation;
use fleet_updater::store::statement_times::{self, StatementTime};

/// Prints and returns the wall time of a whole run (provisioning and update); then prints
/// each later update run, one per edit of the definition.
fn measure(label: &str, definition: Definition, edits: &[Definition]) -> f64 {
    let timed = fleet_run::run(&definition, &StoreLocation::Sqlite, edits);
    let longest = |statements: &[StatementTime]| {
        for statement in statements.iter().take(12) {
            println!(
                "        {:>8.3}s {:>9} runs  {:.150}",
                statement.total.as_secs_f64(),
                statement.runs,
                statement.sql
            );
        }
    };
    println!(
        "{label}: {} instances, {} updated: provisioning {:.2}s + update run {:.2}s = {:.2}s \
         wall time (update run {:.2}s CPU)",
        timed.counts.selected,
        timed.counts.updated,
        timed.provisioning.as_secs_f64(),
        (timed.total - timed.provisioning).as_secs_f64(),
        timed.total.as_secs_f64(),
        timed.update_cpu.as_secs_f64(),
    );
    longest(&timed.statements);
    let mut before: Option<(f64, f64)> = None;
    for (n, again) in timed.again.iter().enumerate() {
        let (wall, cpu) = (
            (again.total - again.opening).as_secs_f64(),
            again.update_cpu.as_secs_f64(),
        );
        print!(
            "    cloud config edited ({}), same state: {} updated: opening {:.2}s + update run \
             {wall:.2}s ({cpu:.2}s CPU)",
            n + 1,
            again.counts.updated,
            again.opening.as_secs_f64(),
        );
        match before {
            Some((wall_before, cpu_before)) => println!(
                ": {:.2} times the run before in wall time, {:.2} in CPU time (target at most 1.1)",
                wall / wall_before,
                cpu / cpu_before
            ),
            None => println!(),
        }
        longest(&again.statements);
        before = Some((wall, cpu));
    }
    timed.total.as_secs_f64()
}

fn main() {
    // `embedded_bench b` measures (b) alone; without arguments, every figure.
    let mut only: Vec<String> = std::env::args().skip(1).collect();
    if only.iter().any(|a| a == "statements") {
        statement_times::record();
        only.retain(|a| a != "statements");
    }
    let wanted = |figure: &str| only.is_empty() || only.iter().any(|o| o == figure);
    let demo = Definition::parse(DEMO)
        .expect("the demo fleet is valid")
        .without_latency();
    if wanted("a") {
        measure(
            "(a) demo fleet, zero latency (target < 1 s)",
            demo.clone(),
            &[],
        );
    }
    let mut large = demo.clone();
    large.provision[0].count = 600;
    large.provision[1].count = 400;
    // (b) is short enough for the machine's noise to swing it by a sixth: the ratio
    // divides by the median of three.
    let thousand = wanted("b").then(|| {
        let mut times: Vec<f64> = (0..3)
            .map(|_| {
                measure(
                    "(b) 1,000 instances, zero latency (target < 10 s)",
                    large.clone(),
                    &[],
                )
            })
            .collect();
        times.sort_by(f64::total_cmp);
        times[1]
    });
    if !wanted("c") {
        return;
    }

    let mut huge = demo;
    huge.provision[0].count = 6_000;
    huge.provision[1].count = 4_000;
    // 18,000 VMs do not fit the demo's /20.
    huge.cloud_config = huge
        .cloud_config
        .map(|c| c.replace("10.244.0.0/20", "10.240.0.0/12"));
    // Every VM type's cloud properties changed, twice: every instance outdated again.
    let edited = |small: &str, medium: &str| {
        let mut edited = huge.clone();
        edited.cloud_config = edited.cloud_config.as_ref().map(|c| {
            c.replace("ram: 2048", &format!("ram: {small}"))
                .replace("ram: 4096", &format!("ram: {medium}"))
        });
        edited
    };
    let edits = [edited("3072", "6144"), edited("2560", "5120")];
    let ten_thousand = measure(
        "(c) 10,000 instances, zero latency (target < 40 s)",
        huge,
        &edits,
    );
    if let Some(thousand) = thousand {
        println!(
            "(c)/(b): {:.1} times the (b) median for 10 times the instances (target at most 12)",
            ten_thousand / thousand
        );
    }
}
