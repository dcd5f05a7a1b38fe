//! The house rules ARCHITECTURE.md states, checked on the sources of the
//! whole workspace (`sim`, `exec`, `plots` and the `cephalo` binary):
//!
//! * **Imports run one way**: inside every module folder (a crate's root
//!   and each folder module), the graph of which child imports which has
//!   no cycle. A folder's own items (its `mod.rs`, or the crate root) count
//!   as one node, so a child importing `super::X` while `mod.rs` imports
//!   that child is a cycle too.
//! * **No walls**: no function over [`MAX_FN_LINES`] lines, at most
//!   [`MAX_LONG_FNS`] over [`LONG_FN_LINES`] (the same count as
//!   `../shared/tools/house.py`: brace depth from the signature, comments
//!   and strings blanked, test code left out).
//! * **The docs list what the registries hold**: ARCHITECTURE.md's planner
//!   table names every registered planner with its family, the strategy
//!   table every value of every axis, the code map every top-level module
//!   of `sim`; the README names every planner.
//!
//! A reader of source text, not a compiler: it resolves `crate::`,
//! `super::`, `self::` and child-module paths (and `use` trees) to the
//! longest known module prefix.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest function allowed, lines.
const MAX_FN_LINES: usize = 200;
/// A function longer than this is long.
const LONG_FN_LINES: usize = 100;
/// Long functions allowed in the workspace.
const MAX_LONG_FNS: usize = 12;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the sim crate lies in the workspace")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source with comments, strings and char literals blanked (newlines
/// kept), and everything from `#[cfg(test)]` on dropped.
fn code(src: &str) -> String {
    let src = match src.find("#[cfg(test)]") {
        Some(i) => &src[..i],
        None => src,
    };
    let b = src.as_bytes();
    let (mut out, mut i) = (String::with_capacity(b.len()), 0);
    let keep_newlines = |s: &[u8], out: &mut String| {
        out.extend(s.iter().filter(|&&c| c == b'\n').map(|_| '\n'));
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            keep_newlines(&b[i..j], &mut out);
            i = j;
        } else if let Some(hashes) = raw_string_start(b, i) {
            let open = i + 2 + hashes + usize::from(b[i] == b'b');
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let end = find(b, open, &close).map_or(b.len(), |j| j + close.len());
            out.push_str("\"\"");
            keep_newlines(&b[i..end], &mut out);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            keep_newlines(&b[i..j.min(b.len())], &mut out);
            i = j + 1;
        } else if b[i] == b'\'' && char_literal_len(&b[i..]).is_some() {
            out.push_str("' '");
            i += char_literal_len(&b[i..]).unwrap();
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// `r"`, `r#"`, `br"`...: the number of `#`s, when a raw string starts at `i`.
fn raw_string_start(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let j = i + usize::from(b[i] == b'b');
    if b.get(j) != Some(&b'r') {
        return None;
    }
    let hashes = b[j + 1..].iter().take_while(|&&c| c == b'#').count();
    (b.get(j + 1 + hashes) == Some(&b'"')).then_some(hashes)
}

fn find(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    (from..b.len().saturating_sub(needle.len() - 1)).find(|&j| b[j..].starts_with(needle))
}

/// Length of a char literal at the start of `b` (`'a'`, `'\n'`,
/// `'\u{1F600}'`), `None` for a lifetime.
fn char_literal_len(b: &[u8]) -> Option<usize> {
    if b.get(1) == Some(&b'\\') {
        let end = b[2..].iter().position(|&c| c == b'\'')?;
        return (end < 10).then_some(end + 3);
    }
    let s = std::str::from_utf8(&b[1..b.len().min(6)])
        .ok()
        .or_else(|| {
            // A multi-byte char cut by the slice: take what decodes.
            (2..=5)
                .rev()
                .find_map(|n| std::str::from_utf8(&b[1..b.len().min(n)]).ok())
        })?;
    let c = s.chars().next()?;
    (s[c.len_utf8()..].starts_with('\'')).then_some(c.len_utf8() + 2)
}

/// A source file's module path inside its crate (`plan/file.rs` ->
/// `[plan, file]`; `mod.rs`, `lib.rs` and `main.rs` name their folder).
fn module_path(src_dir: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src_dir).unwrap().with_extension("");
    let mut v: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(v.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        v.pop();
    }
    v
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Every path of `code` that may name a module: `a::b::C` runs, with the
/// segments of `use` trees expanded (`use a::{b, c::D}` gives `a::b` and
/// `a::c::D`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // `use` trees.
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before_ok = i == 0 || !is_ident_byte(rest.as_bytes()[i - 1]);
        let tail = &rest[i + 4..];
        if before_ok {
            if let Some(end) = tail.find(';') {
                // `a as b` becomes `a@b`, then whitespace goes.
                let words: Vec<&str> = tail[..end].split_whitespace().collect();
                let tree: String = words.join(" ").replace(" as ", "@").replace(' ', "");
                expand(&[], &tree, &mut out);
            }
        }
        rest = tail;
    }
    // Inline paths.
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if is_ident_byte(b[i]) && (i == 0 || !(is_ident_byte(b[i - 1]) || b[i - 1] == b':')) {
            let mut segs = Vec::new();
            let mut j = i;
            loop {
                let s = j;
                while j < b.len() && is_ident_byte(b[j]) {
                    j += 1;
                }
                segs.push(code[s..j].to_string());
                if b[j..].starts_with(b"::") && b.get(j + 2).is_some_and(|&c| is_ident_byte(c)) {
                    j += 2;
                } else {
                    break;
                }
            }
            if segs.len() > 1 {
                out.push(segs);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// Expands one `use` tree into its paths.
fn expand(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.strip_prefix("pub(crate)").unwrap_or(tree);
    let Some(open) = tree.find('{') else {
        let mut p = prefix.to_vec();
        let head = tree.split('@').next().unwrap_or(tree);
        p.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
        out.push(p);
        return;
    };
    let mut p = prefix.to_vec();
    p.extend(
        tree[..open]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(String::from),
    );
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut depth, mut start) = (0, 0);
    let mut parts = Vec::new();
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    for part in parts.into_iter().filter(|s| !s.is_empty()) {
        let part = part.split('@').next().unwrap_or(part);
        if part == "self" {
            out.push(p.clone());
        } else {
            expand(&p, part, out);
        }
    }
}

/// `code` with `super::` inside inline `mod name { ... }` blocks read as
/// `self::` (one level up from an inline module is the file's module, which
/// the graph resolves `self::` to).
fn inline_modules_flattened(code: &str) -> String {
    let mut out = code.to_string();
    let mut from = 0;
    while let Some(i) = out[from..].find("mod ").map(|i| i + from) {
        from = i + 4;
        if i > 0 && is_ident_byte(out.as_bytes()[i - 1]) {
            continue;
        }
        let name_end = out[from..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(out.len(), |k| from + k);
        if !out[name_end..].trim_start().starts_with('{') {
            continue;
        }
        let open = name_end + out[name_end..].find('{').unwrap();
        let mut depth = 0i64;
        let mut close = out.len();
        for (k, c) in out[open..].char_indices() {
            depth += i64::from(c == '{') - i64::from(c == '}');
            if depth == 0 {
                close = open + k;
                break;
            }
        }
        let inner = out[open..close].replace("super::", "self::");
        out.replace_range(open..close, &inner);
    }
    out
}

/// One crate's module graph: every module path, and for every folder the
/// edges between its children (`"mod"` standing for the folder's own items).
struct Crate {
    name: String,
    /// Per folder module path: (from child, to child) edges, with one
    /// example reference each.
    edges: BTreeMap<Vec<String>, BTreeMap<(String, String), String>>,
}

impl Crate {
    fn read(name: &str, src_dir: &Path) -> Crate {
        let mut files = Vec::new();
        rust_files(src_dir, &mut files);
        files.retain(|f| !f.components().any(|c| c.as_os_str() == "bin"));
        let modules: BTreeMap<Vec<String>, String> = files
            .iter()
            .map(|f| (module_path(src_dir, f), std::fs::read_to_string(f).unwrap()))
            .collect();
        let known: BTreeSet<&Vec<String>> = modules.keys().collect();
        let mut edges: BTreeMap<Vec<String>, BTreeMap<(String, String), String>> = BTreeMap::new();
        for (here, src) in &modules {
            let code = inline_modules_flattened(&code(src));
            let children: BTreeSet<String> = known
                .iter()
                .filter(|m| m.len() == here.len() + 1 && m.starts_with(here))
                .map(|m| m[here.len()].clone())
                .collect();
            for path in paths(&code) {
                let (mut base, rest): (Vec<String>, &[String]) = match path[0].as_str() {
                    "crate" => (Vec::new(), &path[1..]),
                    "self" => (here.clone(), &path[1..]),
                    "super" => {
                        let mut b = here.clone();
                        let mut k = 0;
                        while path.get(k).is_some_and(|s| s == "super") {
                            b.pop();
                            k += 1;
                        }
                        (b, &path[k..])
                    }
                    first if children.contains(first) => (here.clone(), &path[..]),
                    _ => continue,
                };
                for seg in rest {
                    let mut next = base.clone();
                    next.push(seg.clone());
                    if !known.contains(&next) {
                        break;
                    }
                    base = next;
                }
                let target = base;
                // The folders both lie in: an edge between their children.
                let common = here.iter().zip(&target).take_while(|(a, b)| a == b).count();
                for k in 0..=common {
                    let folder = here[..k].to_vec();
                    if k > 0 && !known.contains(&folder) {
                        continue;
                    }
                    let a = here.get(k).cloned().unwrap_or_else(|| "mod".into());
                    let b = target.get(k).cloned().unwrap_or_else(|| "mod".into());
                    if a != b {
                        edges
                            .entry(folder)
                            .or_default()
                            .entry((a, b))
                            .or_insert_with(|| path.join("::"));
                    }
                }
            }
        }
        Crate {
            name: name.into(),
            edges,
        }
    }

    /// Every cycle (a strongly connected component of two or more
    /// children) of every folder, with the edges inside it.
    fn cycles(&self) -> Vec<String> {
        let mut found = Vec::new();
        for (folder, edges) in &self.edges {
            let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for (a, b) in edges.keys() {
                next.entry(a).or_default().push(b);
                next.entry(b).or_default();
            }
            let reach = |from: &str| -> BTreeSet<&str> {
                let mut seen = BTreeSet::new();
                let mut todo = vec![from];
                while let Some(x) = todo.pop() {
                    for &y in &next[x] {
                        if seen.insert(y) {
                            todo.push(y);
                        }
                    }
                }
                seen
            };
            let mut done: BTreeSet<&str> = BTreeSet::new();
            for &a in next.keys() {
                if done.contains(a) {
                    continue;
                }
                let ra = reach(a);
                let comp: Vec<&str> = next
                    .keys()
                    .copied()
                    .filter(|&b| b == a || (ra.contains(b) && reach(b).contains(a)))
                    .collect();
                done.extend(&comp);
                if comp.len() > 1 {
                    let why: Vec<String> = edges
                        .iter()
                        .filter(|((x, y), _)| {
                            comp.contains(&x.as_str()) && comp.contains(&y.as_str())
                        })
                        .map(|((x, y), eg)| format!("{x} -> {y} ({eg})"))
                        .collect();
                    found.push(format!(
                        "{}::{}: {}",
                        self.name,
                        folder.join("::"),
                        why.join("; ")
                    ));
                }
            }
        }
        found
    }
}

/// The crates of the workspace: (name, source folder).
fn crates() -> Vec<(&'static str, PathBuf)> {
    let r = root();
    vec![
        ("sim", r.join("sim/src")),
        ("exec", r.join("exec/src")),
        ("plots", r.join("plots/src")),
        ("cephalo", r.join("src")),
    ]
}

#[test]
fn imports_run_one_way_in_every_module_folder() {
    let mut cycles = Vec::new();
    let mut folders = 0;
    for (name, dir) in crates() {
        let c = Crate::read(name, &dir);
        folders += c.edges.len();
        cycles.extend(c.cycles());
    }
    assert!(folders > 10, "read only {folders} folders");
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let dir = std::env::temp_dir().join(format!("house-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod a;\npub mod b;\n").unwrap();
    std::fs::write(
        dir.join("a/mod.rs"),
        "pub mod x;\npub struct T;\nfn f() { x::g(); }\n",
    )
    .unwrap();
    std::fs::write(dir.join("a/x.rs"), "use super::T;\npub fn g() {}\n").unwrap();
    std::fs::write(dir.join("b.rs"), "use crate::a::{x::g, T};\n").unwrap();
    let c = Crate::read("t", &dir);
    let cycles = c.cycles();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(cycles[0].starts_with("t::a: mod -> x"), "{cycles:?}");
}

/// Every function's length in lines, as `house.py` counts it.
fn function_lengths() -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (_, dir) in crates() {
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for f in files {
            let code = code(&std::fs::read_to_string(&f).unwrap());
            let lines: Vec<&str> = code.lines().collect();
            let mut i = 0;
            while i < lines.len() {
                let Some(name) = fn_name(lines[i]) else {
                    i += 1;
                    continue;
                };
                let (mut depth, mut j, mut opened) = (0i64, i, false);
                while j < lines.len() {
                    depth += lines[j].matches('{').count() as i64;
                    depth -= lines[j].matches('}').count() as i64;
                    opened |= lines[j].contains('{');
                    if (opened && depth <= 0) || (!opened && lines[j].trim_end().ends_with(';')) {
                        break;
                    }
                    j += 1;
                }
                if opened {
                    let rel = f.strip_prefix(root()).unwrap().display().to_string();
                    out.push((j - i + 1, format!("{rel}:{name}")));
                    i = j + 1;
                } else {
                    i += 1;
                }
            }
        }
    }
    out.sort_by(|a, b| b.cmp(a));
    out
}

/// The name of the function a line declares.
fn fn_name(line: &str) -> Option<&str> {
    let mut t = line.trim_start();
    for word in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        t = t.strip_prefix(word).unwrap_or(t);
    }
    let t = t.strip_prefix("fn ")?;
    let end = t.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    (end > 0).then(|| &t[..end])
}

#[test]
fn no_function_is_a_wall() {
    let lens = function_lengths();
    assert!(lens.len() > 500, "found only {} functions", lens.len());
    let too_long: Vec<&(usize, String)> = lens.iter().filter(|x| x.0 > MAX_FN_LINES).collect();
    assert!(
        too_long.is_empty(),
        "over {MAX_FN_LINES} lines: {too_long:?}"
    );
    let long: Vec<&(usize, String)> = lens.iter().filter(|x| x.0 > LONG_FN_LINES).collect();
    assert!(
        long.len() <= MAX_LONG_FNS,
        "{} functions over {LONG_FN_LINES} lines (at most {MAX_LONG_FNS}): {long:?}",
        long.len()
    );
}

/// The rows of the Markdown table between `<!-- name -->` and
/// `<!-- /name -->` in `doc`, each as its cells (backticks stripped), the
/// header and separator left out.
fn table(doc: &str, name: &str) -> Vec<Vec<String>> {
    let open = format!("<!-- {name} -->");
    let close = format!("<!-- /{name} -->");
    let start = doc
        .find(&open)
        .unwrap_or_else(|| panic!("no {open} in the document"));
    let end = doc[start..]
        .find(&close)
        .unwrap_or_else(|| panic!("no {close} in the document"))
        + start;
    doc[start + open.len()..end]
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().replace('`', ""))
                .collect()
        })
        .collect()
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap()
}

#[test]
fn the_planner_table_is_the_registry() {
    use sim::planner::registry::{Role, ENTRIES};
    let rows = table(&architecture(), "planners");
    let want: Vec<Vec<String>> = ENTRIES
        .iter()
        .map(|e| {
            let role = match e.role {
                Role::Native => "native",
                Role::Reference => "reference",
                Role::Baseline => "baseline",
                Role::Ablation => "ablation",
            };
            vec![e.name().into(), e.family.name().into(), role.into()]
        })
        .collect();
    let got: Vec<Vec<String>> = rows.iter().map(|r| r[..3].to_vec()).collect();
    assert_eq!(
        got, want,
        "ARCHITECTURE.md's planner table (name, family, role)"
    );
    for r in &rows {
        let file = root().join("sim/src").join(&r[3]);
        assert!(file.exists(), "{}: no {}", r[0], file.display());
    }
}

#[test]
fn the_strategy_table_is_the_choices() {
    use sim::choice::Choice;
    use sim::strategy::{Accumulation, Attention, Checkpointing, Offload, Sharding, Stack};
    fn names<T>(t: &'static [Choice<T>]) -> String {
        t.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
    }
    let want = vec![
        vec!["sharding".to_string(), names(Sharding::CHOICES)],
        vec!["accumulation".into(), names(Accumulation::CHOICES)],
        vec!["checkpointing".into(), names(Checkpointing::CHOICES)],
        vec!["offload".into(), names(Offload::CHOICES)],
        vec!["attention".into(), names(Attention::CHOICES)],
        vec!["stack".into(), names(Stack::CHOICES)],
    ];
    assert_eq!(table(&architecture(), "strategies"), want);
}

#[test]
fn the_code_map_names_every_module() {
    let lib = std::fs::read_to_string(root().join("sim/src/lib.rs")).unwrap();
    let mut modules: Vec<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect();
    modules.sort();
    let mut mapped: Vec<String> = table(&architecture(), "modules")
        .into_iter()
        .map(|r| {
            let name = r[0].split_whitespace().next().unwrap_or("").to_string();
            name.trim_end_matches('/').to_string()
        })
        .collect();
    mapped.sort();
    assert_eq!(
        mapped, modules,
        "ARCHITECTURE.md's code map and sim/src/lib.rs"
    );
}

#[test]
fn the_readme_names_only_planners_that_exist() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut named = 0;
    for (i, _) in readme.match_indices("--planner ") {
        let name: String = readme[i + 10..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        if name.is_empty() || name == "NAME" {
            continue;
        }
        assert!(
            sim::planner::registry::entry(&name).is_some(),
            "README.md names `--planner {name}`, which is no planner"
        );
        named += 1;
    }
    assert!(named > 0, "README.md names no planner");
}

#[test]
fn the_readme_strategy_table_spells_the_choices() {
    use sim::choice::Choice;
    use sim::strategy::{Accumulation, Attention, Checkpointing, Offload, Sharding, Stack};
    fn row<T>(t: &'static [Choice<T>]) -> String {
        t.iter()
            .map(|c| format!("`{}`", c.name))
            .collect::<Vec<_>>()
            .join(" \\| ")
    }
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for (flag, values) in [
        ("--sharding", row(Sharding::CHOICES)),
        ("--accumulation", row(Accumulation::CHOICES)),
        ("--checkpointing", row(Checkpointing::CHOICES)),
        ("--offload", row(Offload::CHOICES)),
        ("--attention", row(Attention::CHOICES)),
        ("--stack", row(Stack::CHOICES)),
    ] {
        let line = format!("| `{flag}` | {values} |");
        assert!(
            readme.contains(&line),
            "README.md's strategy table has no row `{line}`"
        );
    }
}
