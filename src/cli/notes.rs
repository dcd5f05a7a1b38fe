//! Notes and warnings on stderr, collapsed: notes that differ only in their
//! numbers (one per GPU of a 1,024-GPU cluster) print once with a count.

/// The collapse key of a note: every run of digits replaced by `#`.
fn shape(note: &str) -> String {
    let mut out = String::with_capacity(note.len());
    let mut in_digits = false;
    for c in note.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            in_digits = false;
            out.push(c);
        }
    }
    out
}

/// Notes collapsed: the first of each shape, with how many more share it,
/// in order of first appearance.
pub fn collapse(notes: &[String]) -> Vec<String> {
    let mut groups: Vec<(String, &String, usize)> = Vec::new();
    for n in notes {
        let k = shape(n);
        match groups.iter_mut().find(|g| g.0 == k) {
            Some(g) => g.2 += 1,
            None => groups.push((k, n, 0)),
        }
    }
    groups
        .into_iter()
        .map(|(_, first, more)| match more {
            0 => first.clone(),
            m => format!("{first} (and {m} more like it)"),
        })
        .collect()
}

/// Prints `notes` on stderr, collapsed, each prefixed `prefix: `.
pub fn eprint(prefix: &str, notes: &[String]) {
    for n in collapse(notes) {
        eprintln!("{prefix}: {n}");
    }
}

/// The report's own warnings (those the simulation added, such as
/// measured collectives that served no group), not the cost model's
/// already printed, to stderr.
pub fn eprint_report_warnings(report: &sim::report::Report, printed: &[String]) {
    let new: Vec<String> = report
        .warnings
        .iter()
        .filter(|w| !printed.contains(w))
        .cloned()
        .collect();
    eprint("warning", &new);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_differing_in_numbers_collapse() {
        let notes: Vec<String> = (0..300)
            .map(|i| format!("GPU {i} (t4) holds state only"))
            .chain(["the planner pinned sync".to_string()])
            .collect();
        let c = collapse(&notes);
        assert_eq!(
            c,
            vec![
                "GPU 0 (t4) holds state only (and 299 more like it)".to_string(),
                "the planner pinned sync".to_string()
            ]
        );
        assert_eq!(collapse(&["a".into(), "b".into()]).len(), 2);
    }
}
