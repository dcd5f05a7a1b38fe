//! Golden output: committed studies regenerate as their `results/` files
//! byte for byte (CSV, figures, spec, version, the report).
//!
//! * In every run of the suite, two small studies are regenerated and
//!   compared with their directories, about a second each in a debug build:
//!   `validate-cpu` (committed measurements against predictions, its CSVs
//!   and both figures) and `paper-timeline` (planners, the simulator, a
//!   trace and its Gantt chart).
//! * The ignored test here regenerates every study under `experiments/`
//!   (`experiment run --all`) and compares the whole of `results/`,
//!   `REPORT.md` included. Run it after a change that should not move any
//!   output, in a release build (half a minute; the studies that plan and
//!   simulate at scale take many minutes in a debug build):
//!   `cargo test --release --test cli -- --ignored golden::every`. The
//!   suite leaves it out: a release build of the CLI would add minutes to
//!   every CI run.
use crate::common::{run, scratch};
use std::path::{Path, PathBuf};

/// The studies every run regenerates (see the module docs).
const STUDIES: [&str; 2] = ["validate-cpu", "paper-timeline"];

/// The files under `dir`, as paths relative to it, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Regenerates `experiment run ARGS` into a scratch folder and holds every
/// file of `results/SUB` (of the scratch folder's `SUB`) to it byte for
/// byte, both ways.
fn regenerates(args: &[&str], sub: &str, scratch_name: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = scratch(scratch_name);
    let mut a = vec!["experiment", "run"];
    a.extend(args);
    let (dir, results) = (root.join("experiments"), out.to_str().unwrap().to_string());
    a.extend(["--dir", dir.to_str().unwrap(), "--results", &results]);
    let o = run(&a);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let committed = root.join("results").join(sub);
    let fresh = out.join(sub);
    let (want, got) = (files(&committed), files(&fresh));
    assert!(!want.is_empty(), "{} holds no files", committed.display());
    let shown = |f: &Path| Path::new("results").join(sub).join(f).display().to_string();
    for f in &want {
        assert!(got.contains(f), "{} was not regenerated", shown(f));
    }
    for f in &got {
        assert!(want.contains(f), "{} is new: it is not committed", shown(f));
    }
    for f in &want {
        let (a, b) = (
            std::fs::read(committed.join(f)).unwrap(),
            std::fs::read(fresh.join(f)).unwrap(),
        );
        if a != b {
            let at = a
                .iter()
                .zip(&b)
                .position(|(x, y)| x != y)
                .unwrap_or(a.len().min(b.len()));
            panic!(
                "{} differs from a fresh `cephalo experiment run {}` ({}): \
                 first difference at byte {at} ({} vs {} bytes)",
                shown(f),
                args.join(" "),
                fresh.join(f).display(),
                a.len(),
                b.len()
            );
        }
    }
}

#[test]
fn small_committed_studies_regenerate_byte_for_byte() {
    for study in STUDIES {
        regenerates(&[study], study, &format!("cli-golden-{study}"));
    }
}

/// Every study, in a release build (see the module docs).
#[test]
#[ignore = "many minutes in a debug build: run in release (module docs)"]
fn every_committed_study_regenerates_byte_for_byte() {
    regenerates(&["--all"], "", "cli-golden-all");
}

/// The README's validation claim is the committed `validate-cpu` study's,
/// computed here from its `validation.csv` (median iteration error over
/// the undisturbed runs, the worst point of any run): a re-measurement
/// that moves the numbers fails until the README says what it measured.
#[test]
fn readme_validation_claim_is_the_committed_studys() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let csv = std::fs::read_to_string(root.join("results/validate-cpu/validation.csv")).unwrap();
    let mut r = csv::Reader::from_reader(csv.as_bytes());
    let (mut its, mut worst) = (Vec::new(), 0.0f64);
    let mut runs = 0;
    for row in r.records() {
        let row = row.unwrap();
        let (p, m): (f64, f64) = (row[3].parse().unwrap(), row[4].parse().unwrap());
        let e = (p - m) / m;
        if e.abs() > worst.abs() {
            worst = e;
        }
        if &row[2] == "iteration" {
            runs += 1;
            if &row[5] == "false" {
                its.push(e.abs());
            }
        }
    }
    let n = its.len();
    let med = sim::stats::median(its).expect("an undisturbed run in the committed study");
    let claim = format!(
        "{n} of its {runs} runs undisturbed, iteration predicted within {:.1}% median, worst point of any run {:+.1}%",
        100.0 * med,
        100.0 * worst
    );
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(&claim), "README.md should say: {claim}");
}
