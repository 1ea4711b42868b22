//! allot's Debian package for the release under test (scripts/package.sh
//! builds it): installed with apt on the release's Debian (this host for
//! 22.05, the Debian 13 root for 24.11), where it must hold the plugins in
//! Debian's PluginDir with no debug info, the command, its man pages,
//! completions, unit and examples; then the demo runs from it, on a real
//! cluster that loads the package's plugins, and the package is purged.
//!
//! Needs root, the packages (`scripts/package.sh`) and what
//! `scripts/install-deps.sh` installs: the README's test command does all of it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use allot_cluster_tests::{repo, text, Release};

/// The release's package under target/debian.
fn package(release: &Release) -> PathBuf {
    let deb = Command::new(repo().join("scripts/release.sh")).args([&release.name, "deb"]).output().unwrap();
    let suffix = format!("~{}_amd64.deb", String::from_utf8_lossy(&deb.stdout).trim());
    let dir = repo().join("target/debian");
    std::fs::read_dir(&dir)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("allot_") && n.to_string_lossy().ends_with(&suffix)))
        .unwrap_or_else(|| panic!("no allot_*{suffix} in {}: run scripts/package.sh first (the README's test command does)", dir.display()))
}

/// A command run as root in the release's Debian (this host or its root).
fn in_release(release: &Release, program: &str, args: &[&str]) -> Output {
    let mut cmd = release.command(program, Path::new(release.root.as_deref().unwrap_or(Path::new("/"))));
    cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
    cmd.output().unwrap_or_else(|e| panic!("{program}: {e}"))
}

/// Installs the package for the test's duration; purges it when dropped
/// (if the test did not), so that no later cluster finds its plugins in
/// Slurm's PluginDir.
struct Installed<'a> {
    release: &'a Release,
    purged: bool,
}

impl<'a> Installed<'a> {
    fn new(release: &'a Release, deb: &Path) -> Installed<'a> {
        if let Some(root) = &release.root {
            // apt in the root needs its /proc (scripts/cluster.sh mounts it for the daemons too).
            let proc = root.join("proc");
            let mounted = Command::new("mountpoint").arg("-q").arg(&proc).status().is_ok_and(|s| s.success());
            if !mounted {
                let out = Command::new("mount").args(["-t", "proc", "proc"]).arg(&proc).output().unwrap();
                assert!(out.status.success(), "mount {}: {}", proc.display(), text(&out));
            }
        }
        // Inside the root the package is a file of its own /tmp.
        let at = match &release.root {
            Some(root) => {
                let copy = root.join("tmp").join(deb.file_name().unwrap());
                std::fs::copy(deb, &copy).unwrap();
                release.inner(&copy)
            }
            None => deb.to_owned(),
        };
        let out = in_release(release, "apt-get", &["install", "-y", "-q", "--no-install-recommends", at.to_str().unwrap()]);
        assert!(out.status.success(), "apt-get install {}: {}", at.display(), text(&out));
        Installed { release, purged: false }
    }

    fn purge(&mut self) -> Output {
        self.purged = true;
        in_release(self.release, "apt-get", &["purge", "-y", "-q", "allot"])
    }
}

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        if self.purged {
            return;
        }
        let out = self.purge();
        if !out.status.success() {
            eprintln!("apt-get purge allot: {}", text(&out));
        }
    }
}

/// The host path of a file the package installed.
fn installed(release: &Release, path: &str) -> PathBuf {
    release.root.clone().unwrap_or_else(|| PathBuf::from("/")).join(path.trim_start_matches('/'))
}

#[test]
fn p1_the_package_installs_on_its_debian_and_the_demo_runs_from_it() {
    let release = Release::current();
    let deb = package(release);
    let size = std::fs::metadata(&deb).unwrap().len();
    let mut package = Installed::new(release, &deb);

    // What it holds, where Debian's Slurm looks for it.
    let plugin_dir = "/usr/lib/x86_64-linux-gnu/slurm-wlm";
    let mut shipped = 0;
    for plugin in ["priority_allot", "job_submit_allot", "preempt_allot", "jobcomp_allot"] {
        let so = installed(release, &format!("{plugin_dir}/{plugin}.so"));
        let len = std::fs::metadata(&so).unwrap_or_else(|e| panic!("{}: {e}", so.display())).len();
        shipped += len;
        // No debug info in the shipped objects (it is in allot-dbgsym).
        let sections = Command::new("objdump").arg("-h").arg(&so).output().unwrap();
        assert!(sections.status.success(), "{}", text(&sections));
        assert!(!String::from_utf8_lossy(&sections.stdout).contains(".debug_info"), "{} carries debug info", so.display());
        assert!(len < 8 << 20, "{} is {len} bytes", so.display());
    }
    for path in [
        "/usr/bin/allot",
        "/usr/share/man/man1/allot.1.gz",
        "/usr/share/man/man1/allot-associations.1.gz",
        "/usr/share/bash-completion/completions/allot",
        "/usr/share/zsh/vendor-completions/_allot",
        "/usr/share/fish/vendor_completions.d/allot.fish",
        "/usr/lib/systemd/system/allot-watch.service",
        "/etc/allot/budgets.toml",
        "/etc/allot/allot.conf",
        "/etc/allot/slurm-allot.conf",
        "/usr/share/doc/allot/examples/slurm-allot.conf",
        "/usr/share/doc/allot/copyright",
        // The README's links into the book resolve in the installed tree too.
        "/usr/share/doc/allot/docs/src/admin/install.md",
        "/usr/share/doc/allot/docs/src/researcher/contract.md",
        "/usr/share/doc/allot/docs/src/figures/report-shares.png",
    ] {
        assert!(installed(release, path).exists(), "the package did not install {path}");
    }
    let unit = std::fs::read_to_string(installed(release, "/usr/lib/systemd/system/allot-watch.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/allot watch /etc/allot/budgets.toml"), "{unit}");
    assert!(installed(release, "/var/lib/allot").is_dir(), "no ledger directory");
    let version = in_release(release, "allot", &["--version"]);
    assert!(version.status.success() && text(&version).starts_with("allot "), "{}", text(&version));
    let dpkg = in_release(release, "dpkg-query", &["-W", "-f=${Version} ${Depends}", "allot"]);
    assert!(text(&dpkg).contains(&format!("slurmctld (>= {})", release.version)), "{}", text(&dpkg));
    eprintln!("package {}: {} KiB; plugins {} KiB installed", deb.display(), size / 1024, shipped / 1024);

    // The demo, from the package: its command and the plugins in Slurm's PluginDir.
    let dir = match &release.root {
        Some(root) => root.join("tmp/allot-test-pkgdemo"),
        None => std::env::temp_dir().join("allot-test-pkgdemo"),
    };
    let out = Command::new(repo().join("scripts/demo.sh"))
        .arg("--installed")
        .env("ALLOT_SLURM_RELEASE", &release.name)
        .env("ALLOT_DEMO_DIR", &dir)
        .env("ALLOT_PORT_BASE", "23900")
        .output()
        .unwrap();
    let said = text(&out);
    assert!(out.status.success(), "the demo failed:\n{said}");
    assert!(said.contains("bringing up the cluster with allot's plugins, n4 kept for small jobs (as installed in Slurm's PluginDir)"), "{said}");
    let conf = std::fs::read_to_string(dir.join("etc/slurm.conf")).unwrap_or_default();
    assert!(conf.lines().any(|l| l == format!("PluginDir={plugin_dir}")), "the demo's cluster did not use the package's plugins only");
    // The shipped layout: n4 kept for small jobs, named in the package's allot.conf.
    assert!(
        conf.lines().any(|l| l.starts_with("PartitionName=small Nodes=n[1-4]")) && conf.lines().any(|l| l.starts_with("PartitionName=gpu Nodes=n[1-3]")),
        "{conf}"
    );
    let allot_conf = std::fs::read_to_string(dir.join("etc/allot.conf")).unwrap_or_default();
    assert!(allot_conf.lines().any(|l| l == "SmallJobPartition=small"), "{allot_conf}");

    // Its table: JOB USER BUDGET KIND CONTRACT STATE RESTARTS WAIT.
    let table: Vec<Vec<&str>> = said
        .lines()
        .skip_while(|l| !l.contains("who ran, and who was preempted"))
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(table.len(), 12, "the demo's table:\n{said}");
    let wait = |row: &Vec<&str>| row[7].trim_end_matches('s').parse::<u32>().unwrap_or(u32::MAX);
    for row in table.iter().filter(|r| r[3] == "debug") {
        assert_eq!(row[5], "COMPLETED", "debug job {} did not complete: {row:?}", row[0]);
        assert!(wait(row) <= 30, "debug job {} waited {}: {row:?}", row[0], row[7]);
    }
    assert!(table.iter().any(|r| r[3] == "squat" && r[6].parse::<u32>().unwrap_or(0) >= 1), "no squatter gave way:\n{said}");
    // Nobody was charged for squatting, and it was recorded.
    let usage: Vec<Vec<&str>> =
        said.lines().skip_while(|l| !l.starts_with("LEAF ")).skip(1).take_while(|l| !l.trim().is_empty()).map(|l| l.split_whitespace().collect()).collect();
    for leaf in ["robotics/simulation/sim2real", "robotics/simulation/physics"] {
        let row = usage.iter().find(|r| r[0] == leaf).unwrap_or_else(|| panic!("{leaf} is not in the usage table:\n{said}"));
        assert_eq!(row[3], "0.00", "{leaf} was charged for squatting: {row:?}");
        assert!(row[5].parse::<f64>().unwrap() > 0.0, "{leaf}'s unallocated time is not recorded: {row:?}");
    }
    // And the report: the squatters' budgets delivered their unallocated
    // time, charged nothing; no budget was owed more than it wanted.
    assert!(said.contains("budgets at 95% or more of what they were owed"), "the demo printed no report:\n{said}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap_or_default()).unwrap_or_else(|e| panic!("the demo's report.json: {e}"));
    let nodes = report["nodes"].as_array().unwrap_or_else(|| panic!("no nodes in {report}"));
    let num = |n: &serde_json::Value, k: &str| n[k].as_f64().unwrap_or_else(|| panic!("{k} in {n}"));
    for n in nodes {
        assert!(num(n, "owed_gpu_hours") <= num(n, "demand_gpu_hours") + 1e-3, "owed more than wanted: {n}");
    }
    let sim2real = nodes.iter().find(|n| n["path"] == "robotics/simulation/sim2real").unwrap_or_else(|| panic!("no sim2real in {report}"));
    assert!(num(sim2real, "charged_gpu_hours") == 0.0 && num(sim2real, "unallocated_gpu_hours") > 0.0, "{sim2real}");
    assert!(num(&report, "occupancy") > 0.0 && report["preemptions"].as_u64() >= Some(1), "{report}");

    // Purged: the plugins, the command and /etc/allot go; the ledger's
    // directory (the budget history, every charged run) stays.
    let out = package.purge();
    assert!(out.status.success(), "apt-get purge allot: {}", text(&out));
    assert!(
        !installed(release, &format!("{plugin_dir}/priority_allot.so")).exists() && !installed(release, "/usr/bin/allot").exists(),
        "purge left allot behind"
    );
    assert!(!installed(release, "/etc/allot/budgets.toml").exists(), "purge left /etc/allot");
    assert!(installed(release, "/var/lib/allot").is_dir(), "purge removed the ledger's directory");
}
