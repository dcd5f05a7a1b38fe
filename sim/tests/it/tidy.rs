//! Tidy checks of the `sim` sources: every module
//! opens with a `//!` doc, and non-test code does no I/O (no printing, no
//! files, no environment variables): the CLI does all of that.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn sim_sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    files.sort();
    assert!(files.len() > 20, "found only {} sources", files.len());
    files
        .into_iter()
        .map(|p| {
            let t = std::fs::read_to_string(&p).unwrap();
            (p, t)
        })
        .collect()
}

#[test]
fn every_module_opens_with_a_doc() {
    let missing: Vec<String> = sim_sources()
        .iter()
        .filter(|(_, t)| !t.trim_start().starts_with("//!"))
        .map(|(p, _)| p.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a `//!` doc: {missing:?}"
    );
}

#[test]
fn sim_does_no_io_outside_tests() {
    const FORBIDDEN: [&str; 6] = [
        "println!",
        "eprintln!",
        "print!(",
        "std::fs",
        "std::env",
        "env::var",
    ];
    let mut hits = Vec::new();
    for (p, t) in sim_sources() {
        // Test code (always at the end of a file) may read fixtures.
        let code = t.split("#[cfg(test)]").next().unwrap_or("");
        for (i, line) in code.lines().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            if let Some(f) = FORBIDDEN.iter().find(|f| l.contains(*f)) {
                hits.push(format!("{}:{}: {f}", p.display(), i + 1));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "I/O in sim (move it to the CLI): {hits:#?}"
    );
}
