//! Output paths behave as they do for Unix tools, for every writer
//! (`src/out.rs`): `-` is stdout, devices and FIFOs are written in place
//! (never replaced), symlinks are followed (the link stays a link, its
//! target is replaced and keeps its permissions), a dangling link creates
//! its target, a directory is refused before any work. No test touches the
//! real `/dev`: device nodes are made with `mknod` in a temporary directory.

use crate::common::{device_node, run, scratch, small_reference};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

const WORKLOAD: [&str; 6] = [
    "--gpus",
    "l4,l4",
    "--model",
    "gpt-1.3b",
    "--global-batch",
    "8",
];

fn mkfifo(path: &Path) {
    let o = std::process::Command::new("mkfifo")
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "mkfifo: {o:?}");
}

/// One writer: a command whose output flag `flag` writes a file.
struct Writer {
    name: &'static str,
    /// The command and its flags before the workload.
    command: &'static [&'static str],
    /// Its flags after the workload, then the output flag.
    extra: &'static [&'static str],
}

impl Writer {
    /// The arguments that make `cephalo` write this output to `path`.
    fn args(&self, path: &str) -> Vec<String> {
        self.command
            .iter()
            .chain(&WORKLOAD)
            .chain(self.extra)
            .copied()
            .chain([path])
            .map(str::to_string)
            .collect()
    }
}

/// Every file writer that runs without libtorch (profile --out and
/// --save-profile are in tests/cli/validate.rs, built with exec).
fn writers() -> Vec<Writer> {
    vec![
        Writer {
            name: "simulate --csv",
            command: &["simulate"],
            extra: &["--batch", "4,4", "--csv"],
        },
        Writer {
            name: "simulate --trace",
            command: &["simulate"],
            extra: &["--batch", "4,4", "--trace"],
        },
        Writer {
            name: "plan --out",
            command: &["plan"],
            extra: &["--out"],
        },
    ]
}

#[test]
fn a_device_node_is_written_in_place_and_a_full_one_is_exit_1() {
    let d = scratch("outputs-device");
    for w in writers() {
        let node = d.join(format!("full-{}", w.name.replace([' ', '-'], "_")));
        if device_node(&node, 7).is_none() {
            return;
        }
        let o = run(&w.args(node.to_str().unwrap()));
        assert_eq!(o.code, 1, "{}: {}", w.name, o.stderr);
        assert!(
            o.stderr.contains(node.to_str().unwrap()) && o.stderr.contains("No space left"),
            "{}: the error names the path and the OS error: {}",
            w.name,
            o.stderr
        );
        let m = std::fs::symlink_metadata(&node).unwrap();
        assert!(
            m.file_type().is_char_device(),
            "{}: the device node was replaced",
            w.name
        );
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(left.is_empty(), "{}: temporaries left: {left:?}", w.name);
    }
    // A writable device (a stand-in for /dev/null, 1:3) takes the output and
    // stays a device.
    let null = d.join("null");
    assert!(device_node(&null, 3).is_some());
    let o = run(&writers()[1].args(null.to_str().unwrap()));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(std::fs::symlink_metadata(&null)
        .unwrap()
        .file_type()
        .is_char_device());
}

#[test]
fn a_fifo_with_a_reader_receives_the_output() {
    let d = scratch("outputs-fifo");
    for w in writers() {
        let fifo = d.join(format!("pipe-{}", w.name.replace([' ', '-'], "_")));
        mkfifo(&fifo);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        let o = run(&w.args(fifo.to_str().unwrap()));
        assert_eq!(o.code, 0, "{}: {}", w.name, o.stderr);
        let got = reader.join().unwrap();
        assert!(got.len() > 20, "{}: the reader got {got:?}", w.name);
        assert!(
            std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo(),
            "{}: the FIFO was replaced",
            w.name
        );
    }
}

#[test]
fn a_symlink_keeps_being_a_link_and_its_target_is_updated_with_its_permissions() {
    let d = scratch("outputs-symlink");
    for w in writers() {
        let tag = w.name.replace([' ', '-'], "_");
        let target = d.join(format!("run-42-{tag}.out"));
        std::fs::write(&target, "old").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = d.join(format!("latest-{tag}.out"));
        std::os::unix::fs::symlink(target.file_name().unwrap(), &link).unwrap();
        let o = run(&w.args(link.to_str().unwrap()));
        assert_eq!(o.code, 0, "{}: {}", w.name, o.stderr);
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{}: the link was replaced by a file",
            w.name
        );
        let text = std::fs::read_to_string(&target).unwrap();
        assert!(
            text != "old" && text.len() > 20,
            "{}: target not updated",
            w.name
        );
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640, "{}: permissions not kept", w.name);
    }
}

#[test]
fn a_dangling_symlink_creates_its_target() {
    let d = scratch("outputs-dangling");
    for w in writers() {
        let tag = w.name.replace([' ', '-'], "_");
        let link = d.join(format!("latest-{tag}.out"));
        let target = d.join(format!("new-{tag}.out"));
        std::os::unix::fs::symlink(target.file_name().unwrap(), &link).unwrap();
        let o = run(&w.args(link.to_str().unwrap()));
        assert_eq!(o.code, 0, "{}: {}", w.name, o.stderr);
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(
            std::fs::read_to_string(&target).unwrap().len() > 20,
            "{}: target not created",
            w.name
        );
    }
    // A link into a directory that does not exist is refused before the work.
    let link = d.join("into-nowhere.csv");
    std::os::unix::fs::symlink("no-such-dir/x.csv", &link).unwrap();
    let o = run(&writers()[0].args(link.to_str().unwrap()));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("does not exist"), "{}", o.stderr);
    assert!(o.stdout.is_empty(), "worked before refusing: {}", o.stdout);
    // A symlink loop is refused, naming the path.
    let (a, b) = (d.join("loop-a.csv"), d.join("loop-b.csv"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let o = run(&writers()[0].args(a.to_str().unwrap()));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("loop") && o.stderr.contains("loop-a.csv"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_directory_is_refused_before_any_work() {
    let d = scratch("outputs-directory");
    for w in writers() {
        let o = run(&w.args(d.to_str().unwrap()));
        assert_eq!(o.code, 2, "{}: {}", w.name, o.stderr);
        assert!(o.stderr.contains("is a directory"), "{}", o.stderr);
        assert!(
            o.stdout.is_empty(),
            "{}: worked first: {}",
            w.name,
            o.stdout
        );
    }
}

#[test]
fn dash_is_standard_output_for_every_flag() {
    for w in writers() {
        let o = run(&w.args("-"));
        assert_eq!(o.code, 0, "{}: {}", w.name, o.stderr);
        let marker = match w.name {
            "simulate --csv" => "rank,gpu,",
            "simulate --trace" => "\"traceEvents\"",
            _ => "\"format\": \"cephalo-plan/1\"",
        };
        assert!(
            o.stdout.contains(marker),
            "{}: stdout lacks {marker}",
            w.name
        );
        assert!(!Path::new("-").exists(), "{}: wrote a file named -", w.name);
    }
    // Directory outputs cannot be stdout: refused, naming the flag.
    let o = run(&["experiment", "run", "paper-4gpu", "--results", "-"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--results"), "{}", o.stderr);
}

#[test]
fn calibrate_checks_its_outputs_before_the_fit() {
    let d = scratch("outputs-calibrate");
    let Some(reference) = small_reference(&d) else {
        return;
    };
    let reference = reference.to_str().unwrap().to_string();
    let file = d.join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let out = d.join("c.json");
    let cases = [
        // An --out in a directory that cannot be made.
        (
            vec![
                "--out".to_string(),
                file.join("c.json").display().to_string(),
            ],
            "--out",
        ),
        // A --report-dir that is a file.
        (
            vec![
                "--out".to_string(),
                out.display().to_string(),
                "--report-dir".to_string(),
                file.display().to_string(),
            ],
            "--report-dir",
        ),
        // A --report-dir of `-`.
        (
            vec![
                "--out".to_string(),
                out.display().to_string(),
                "--report-dir".to_string(),
                "-".to_string(),
            ],
            "--report-dir",
        ),
    ];
    for (extra, flag) in cases {
        let mut a = vec![
            "calibrate".to_string(),
            "--reference".into(),
            reference.clone(),
        ];
        a.extend(extra);
        let o = run(&a);
        assert_eq!(o.code, 2, "{a:?}: {}", o.stderr);
        assert!(o.stderr.contains(flag), "{a:?}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{a:?}: fitted first");
        assert!(!out.exists(), "{a:?}: wrote the calibration");
    }
    // A device as --out needs no --force (nothing is replaced) and takes the file.
    let null = d.join("null");
    if device_node(&null, 3).is_none() {
        return;
    }
    let o = run(&[
        "calibrate".into(),
        "--reference".into(),
        reference,
        "--out".into(),
        null.display().to_string(),
        "--report-dir".into(),
        d.join("report").display().to_string(),
        "--no-figures".into(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(std::fs::symlink_metadata(&null)
        .unwrap()
        .file_type()
        .is_char_device());
    assert!(d.join("report/cv_report.md").is_file());
}
