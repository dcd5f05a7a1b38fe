//! Progress on stderr for long work, drawn only when stderr is a terminal
//! (a pipe or a log file gets nothing, so outputs stay byte-identical).

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// A bar of `n` steps counting `unit`s, labelled `msg`.
pub fn bar(n: u64, msg: &str, unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(n);
    b.set_style(
        ProgressStyle::with_template(&format!(
            "{{msg}} [{{bar:40}}] {{pos}}/{{len}} {unit} ({{eta}})"
        ))
        .expect("progress template")
        .progress_chars("=> "),
    );
    b.set_message(msg.to_string());
    b
}

/// A spinner with the elapsed time, for work of unknown length (a large
/// plan); finish it with `finish_and_clear`.
pub fn spinner(msg: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new_spinner();
    b.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("spinner template"),
    );
    b.set_message(msg.to_string());
    b.enable_steady_tick(Duration::from_millis(120));
    b
}
