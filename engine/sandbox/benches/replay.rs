//! Replay throughput: recorded real-party messages re-driven per second against the
//! recording's own revision, per template, beside the rate of recording the same
//! conversations (the template tests' runner driving them live in the sandbox) in the same
//! run — so the figure is a ratio this noisy machine cannot move much.
//!
//! ```sh
//! cargo bench -p colloquy-sandbox --bench replay
//! ```
//!
//! The recordings are the cases of the built-in templates' test files and of the
//! credit-assessment example (its Rust hook build, `templates/examples/build.sh`: every
//! message calls the hook, in recording and in replay alike).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use colloquy_core::clock::ManualClock;
use colloquy_core::hooks::HookCaller;
use colloquy_sandbox::TEST_EPOCH_MS;
use colloquy_sandbox::replay::{Verdict, recorded_inputs, replay};
use colloquy_sandbox::suite::load::{TemplateDirs, load};
use colloquy_sandbox::suite::run::run_suite;

/// How long each template's replays run.
const MEASURE: Duration = Duration::from_secs(3);

fn templates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let clock = Arc::new(ManualClock::new(TEST_EPOCH_MS));
    let hooks: Arc<dyn HookCaller> = Arc::new(
        colloquy_hooks::HookRuntime::with_clock(
            colloquy_hooks::HookRuntimeConfig::default(),
            clock.clone(),
        )
        .expect("hook runtime"),
    );
    println!(
        "{:<20} {:>6} {:>14} {:>14} {:>8}",
        "template", "inputs", "record msg/s", "replay msg/s", "replay/record"
    );
    for (file, template, with_hooks) in [
        ("fipa-request.test.yaml", "fipa-request", false),
        ("fipa-query.test.yaml", "fipa-query", false),
        ("fipa-contract-net.test.yaml", "fipa-contract-net", false),
        (
            "examples/credit-assessment/credit-assessment.test.yaml",
            "credit-assessment",
            true,
        ),
    ] {
        let mut suite = load(&templates_dir().join(file), &mut TemplateDirs::default())
            .unwrap_or_else(|error| panic!("{file}: {error}"));
        suite.templates.retain(|t| &*t.name == template);
        let hooks = with_hooks.then(|| hooks.clone());
        // Warm (hook compile, caches), then record: the runner drives every case live.
        runtime.block_on(run_suite(&suite, &clock, hooks.clone(), None));
        let (mut recorded_inputs_total, mut rounds) = (0usize, 0usize);
        let began = Instant::now();
        let mut reports = Vec::new();
        while began.elapsed() < MEASURE {
            reports = runtime.block_on(run_suite(&suite, &clock, hooks.clone(), None));
            recorded_inputs_total += reports
                .iter()
                .map(|report| recorded_inputs(&report.events))
                .sum::<usize>();
            rounds += 1;
        }
        let record_rate = recorded_inputs_total as f64 / began.elapsed().as_secs_f64();
        let logs: Vec<_> = reports
            .into_iter()
            .filter(|report| !report.events.is_empty())
            .map(|report| (report.template, report.events))
            .collect();
        let inputs_per_round: usize = logs.iter().map(|(_, log)| recorded_inputs(log)).sum();
        let (mut replayed, began) = (0usize, Instant::now());
        while began.elapsed() < MEASURE {
            for (template, log) in &logs {
                let verdict = runtime
                    .block_on(replay(log, template, &clock, hooks.clone()))
                    .expect("replays");
                assert_eq!(verdict, Verdict::Same, "{template:?}");
            }
            replayed += inputs_per_round;
        }
        let replay_rate = replayed as f64 / began.elapsed().as_secs_f64();
        println!(
            "{template:<20} {inputs_per_round:>6} {record_rate:>14.0} {replay_rate:>14.0} {:>7.2}x  ({rounds} recording rounds)",
            replay_rate / record_rate
        );
    }
}
