//! The width human-readable outputs keep to, and the wrapping that keeps
//! them there: `plan`'s and `compare`'s tables read in 200 columns at any
//! cluster size (long lists are summarised where they are built; prose
//! lines, such as reasons and sources, are wrapped here).

/// Widest line of a human-readable output, characters.
pub const WIDTH: usize = 200;

/// `text` with every line wider than [`WIDTH`] broken at spaces, the
/// continuation lines indented two more than the line's own indent.
pub fn wrap(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let lead = &line[..line.len() - line.trim_start().len()];
        let more = format!("{lead}  ");
        let opts = textwrap::Options::new(WIDTH)
            .initial_indent(lead)
            .subsequent_indent(&more);
        for l in textwrap::wrap(line.trim_start(), opts) {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_wrap_under_their_indent_and_short_ones_stay() {
        let long = format!("  {}", "word ".repeat(100));
        let w = wrap(&format!("short\n{long}\n"));
        let lines: Vec<&str> = w.lines().collect();
        assert_eq!(lines[0], "short");
        assert!(lines.len() > 3, "{w}");
        assert!(lines.iter().all(|l| l.chars().count() <= WIDTH), "{w}");
        assert!(
            lines[1].starts_with("  word") && lines[2].starts_with("    word"),
            "{w}"
        );
    }
}
