//! Progress on stderr for long work: a bar or spinner when stderr is a
//! terminal; otherwise (a Slurm or Kubernetes log, a pipe) a plain line
//! every [`period`] (`<what>: 12/40 workloads (30%), 95 s elapsed, about
//! 221 s left`), so a batch job's log shows it is alive. Stdout is never
//! touched, so outputs stay byte-identical.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Environment variable that sets the seconds between log lines off a
/// terminal ([`DEFAULT_PERIOD_S`] by default; `0`: a line per step).
pub const PERIOD_ENV: &str = "CEPHALO_PROGRESS_S";

/// Seconds between progress lines off a terminal: often enough that a
/// batch log shows the job is alive, rare enough to stay readable.
pub const DEFAULT_PERIOD_S: f64 = 30.0;

/// The period between log lines ([`PERIOD_ENV`], else [`DEFAULT_PERIOD_S`];
/// an unreadable value falls back to the default).
pub fn period() -> Duration {
    let s = std::env::var(PERIOD_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(DEFAULT_PERIOD_S);
    Duration::from_secs_f64(s)
}

/// Progress of a piece of work: drawn on a terminal, logged as lines
/// otherwise.
pub struct Progress {
    bar: ProgressBar,
    log: Option<Log>,
}

/// The off-terminal form: counters and the time of the last line.
struct Log {
    msg: String,
    unit: String,
    /// Steps in all (`None`: a spinner, unknown length).
    total: Option<u64>,
    done: AtomicU64,
    start: Instant,
    last: Mutex<Instant>,
    every: Duration,
    /// The spinner's ticker thread and the way to stop it.
    ticker: Option<(Sender<()>, JoinHandle<()>)>,
}

/// Whole seconds since `t`.
fn secs(t: Instant) -> u64 {
    t.elapsed().as_secs()
}

impl Log {
    fn line(&self) -> String {
        let done = self.done.load(Ordering::Relaxed);
        let el = self.start.elapsed().as_secs_f64();
        match self.total {
            Some(n) if n > 0 => {
                let left = if done > 0 {
                    format!(
                        ", about {:.0} s left",
                        el / done as f64 * n.saturating_sub(done) as f64
                    )
                } else {
                    String::new()
                };
                format!(
                    "{}: {done}/{n} {} ({:.0}%), {:.0} s elapsed{left}",
                    self.msg,
                    self.unit,
                    100.0 * done as f64 / n as f64,
                    el
                )
            }
            _ => format!("{}: still running, {:.0} s elapsed", self.msg, el),
        }
    }
}

impl Progress {
    /// One step done (a line off a terminal when the period has passed).
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        if let Some(log) = &self.log {
            log.done.fetch_add(n, Ordering::Relaxed);
            let mut last = log.last.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() >= log.every {
                *last = Instant::now();
                eprintln!("{}", log.line());
            }
        }
    }

    /// Ends the progress (clears the bar; stops a spinner's log lines).
    pub fn finish_and_clear(mut self) {
        self.bar.finish_and_clear();
        self.stop();
    }

    fn stop(&mut self) {
        if let Some((tx, h)) = self.log.as_mut().and_then(|l| l.ticker.take()) {
            drop(tx);
            let _ = h.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A bar of `n` steps counting `unit`s, labelled `msg`.
pub fn bar(n: u64, msg: &str, unit: &str) -> Progress {
    if !std::io::stderr().is_terminal() {
        return Progress {
            bar: ProgressBar::hidden(),
            log: Some(Log {
                msg: msg.to_string(),
                unit: unit.to_string(),
                total: Some(n),
                done: AtomicU64::new(0),
                start: Instant::now(),
                last: Mutex::new(Instant::now()),
                every: period(),
                ticker: None,
            }),
        };
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
    Progress { bar: b, log: None }
}

/// A spinner with the elapsed time, for work of unknown length (a large
/// plan); finish it with `finish_and_clear`. Off a terminal a thread logs
/// `<msg>: still running, N s elapsed` every period (none with period 0).
pub fn spinner(msg: &str) -> Progress {
    if !std::io::stderr().is_terminal() {
        let every = period();
        let start = Instant::now();
        let ticker = (!every.is_zero()).then(|| {
            let (tx, rx) = mpsc::channel::<()>();
            let label = msg.to_string();
            let h = std::thread::spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
                    eprintln!("{label}: still running, {} s elapsed", secs(start));
                }
            });
            (tx, h)
        });
        return Progress {
            bar: ProgressBar::hidden(),
            log: Some(Log {
                msg: msg.to_string(),
                unit: String::new(),
                total: None,
                done: AtomicU64::new(0),
                start,
                last: Mutex::new(start),
                every,
                ticker,
            }),
        };
    }
    let b = ProgressBar::new_spinner();
    b.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("spinner template"),
    );
    b.set_message(msg.to_string());
    b.enable_steady_tick(Duration::from_millis(120));
    Progress { bar: b, log: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_say_how_far_and_how_long() {
        let log = Log {
            msg: "paper-scale".into(),
            unit: "workloads".into(),
            total: Some(40),
            done: AtomicU64::new(10),
            start: Instant::now() - Duration::from_secs(20),
            last: Mutex::new(Instant::now()),
            every: Duration::ZERO,
            ticker: None,
        };
        let l = log.line();
        assert!(
            l.starts_with("paper-scale: 10/40 workloads (25%), 20 s elapsed, about 60 s left"),
            "{l}"
        );
        let spin = Log { total: None, ..log };
        assert!(
            spin.line().contains("still running, 20 s elapsed"),
            "{}",
            spin.line()
        );
    }
}
