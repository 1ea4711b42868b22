//! The book (`docs/`) and the READMEs as a reader meets them: every link
//! resolves (the file, and the anchor as mdBook spells a heading's id), every
//! page is in the book's SUMMARY.md, every `{{#include}}` names lines that
//! exist, every `allot` command they show is one the CLI takes (its
//! subcommands and its flags), and every script they name exists. With
//! mdBook installed (`scripts/install-deps.sh --docs`), the book builds
//! without a warning (`#[ignore]`d otherwise; `scripts/test.sh` runs it).

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn book_src() -> PathBuf {
    repo().join("docs/src")
}

fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// Every page a reader may open: the book's, and the READMEs that lead to it.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![repo().join("README.md"), repo().join("sim/README.md")];
    markdown_under(&book_src(), &mut out);
    out.sort();
    out
}

/// A page's text as mdBook reads it (`{{#include}}` is mdBook's, left as is).
fn read(page: &Path) -> String {
    std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()))
}

fn shown(page: &Path) -> String {
    page.strip_prefix(repo()).unwrap_or(page).display().to_string()
}

/// mdBook's id of a heading (`normalize_id`): lower case, whitespace to `-`,
/// only alphanumerics, `-` and `_` kept; a repeated heading gets `-1`, `-2`.
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut heading: Option<String> = None;
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) if heading.is_some() => heading.as_mut().unwrap().push_str(&t),
            Event::End(TagEnd::Heading(_)) => {
                let title = heading.take().unwrap();
                let id: String = title
                    .chars()
                    .filter_map(|c| match c {
                        c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_lowercase().next().unwrap()),
                        c if c.is_whitespace() => Some('-'),
                        _ => None,
                    })
                    .collect();
                let n = seen.entry(id.clone()).or_default();
                ids.insert(if *n == 0 { id } else { format!("{id}-{n}") });
                *n += 1;
            }
            _ => {}
        }
    }
    ids
}

/// Links and images of a page (their destinations), in order.
fn links(text: &str) -> Vec<String> {
    Parser::new(text)
        .filter_map(|e| match e {
            Event::Start(Tag::Link { dest_url, .. }) | Event::Start(Tag::Image { dest_url, .. }) => Some(dest_url.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn every_link_of_the_book_and_the_readmes_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        for dest in links(&text) {
            if dest.contains("://") || dest.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = dest.split_once('#').map_or((dest.as_str(), None), |(p, a)| (p, Some(a)));
            let target = if path.is_empty() { page.clone() } else { page.parent().unwrap().join(path) };
            if !target.exists() {
                broken.push(format!("{}: {dest}: no such file", shown(&page)));
                continue;
            }
            if let Some(anchor) = anchor {
                if target.extension().is_some_and(|e| e == "md") && !heading_ids(&read(&target)).contains(anchor) {
                    broken.push(format!("{}: {dest}: {} has no heading with the id '{anchor}'", shown(&page), shown(&target)));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} links found: is the book there?");
    assert!(broken.is_empty(), "{} broken link(s):\n{}", broken.len(), broken.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary_and_every_entry_is_a_page() {
    let summary = book_src().join("SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&read(&summary)).iter().map(|l| book_src().join(l)).collect();
    let mut on_disk = Vec::new();
    markdown_under(&book_src(), &mut on_disk);
    let on_disk: BTreeSet<PathBuf> = on_disk.into_iter().filter(|p| *p != summary).collect();
    let missing: Vec<String> = on_disk.difference(&listed).map(|p| shown(p)).collect();
    let dangling: Vec<String> = listed.difference(&on_disk).map(|p| shown(p)).collect();
    assert!(missing.is_empty(), "pages no reader can reach (not in docs/src/SUMMARY.md): {missing:?}");
    assert!(dangling.is_empty(), "SUMMARY.md entries without a page: {dangling:?}");
    assert!(listed.len() >= 20, "{listed:?}");
}

/// `{{#include PATH}}` and `{{#include PATH:FROM:TO}}`: the file exists and
/// the lines are in it, so that a shipped file's excerpt cannot go blank.
#[test]
fn every_include_of_the_book_names_lines_that_exist() {
    let mut bad = Vec::new();
    let mut seen = 0;
    for page in pages() {
        let text = read(&page);
        for piece in text.split("{{#include ").skip(1) {
            let spec = piece.split("}}").next().unwrap().trim();
            seen += 1;
            let mut parts = spec.split(':');
            let file = page.parent().unwrap().join(parts.next().unwrap());
            let Ok(body) = std::fs::read_to_string(&file) else {
                bad.push(format!("{}: {spec}: no such file", shown(&page)));
                continue;
            };
            let lines: Vec<&str> = body.lines().collect();
            let parts: Vec<&str> = parts.collect();
            // `PATH:NAME` is the text between `ANCHOR: NAME` and `ANCHOR_END: NAME`; `PATH:FROM:TO` lines.
            let included: &[&str] = match parts[..] {
                [] => &lines,
                [name] if name.parse::<usize>().is_err() => {
                    let at = |tag: &str| lines.iter().position(|l| l.contains(&format!("{tag}: {name}")));
                    match (at("ANCHOR"), at("ANCHOR_END")) {
                        (Some(a), Some(b)) if a < b => &lines[a + 1..b],
                        _ => {
                            bad.push(format!("{}: {spec}: {} has no ANCHOR/ANCHOR_END pair '{name}'", shown(&page), shown(&file)));
                            continue;
                        }
                    }
                }
                _ => {
                    let range: Vec<usize> = parts.iter().map(|n| n.parse().unwrap_or(usize::MAX)).collect();
                    if range.iter().any(|&n| n == 0 || n > lines.len()) || range.windows(2).any(|w| w[0] > w[1]) {
                        bad.push(format!("{}: {spec}: {} has {} lines", shown(&page), shown(&file), lines.len()));
                        continue;
                    }
                    &lines[range[0] - 1..*range.last().unwrap()]
                }
            };
            // A relative link in included text would resolve from the including page, not its own.
            for dest in links(&included.join("\n")).iter().filter(|d| !d.contains("://")) {
                bad.push(format!("{}: {spec}: the included text links to {dest}, which the book would resolve from {}", shown(&page), shown(&page)));
            }
        }
    }
    assert!(seen >= 4, "{seen} includes");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Commands a page shows: lines of its code blocks and its inline code that
/// start with `allot ` (after `$ `, `sudo ` and `VAR=value` words).
fn allot_commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block: Option<String> = None;
    let take = |line: &str, out: &mut Vec<String>| {
        let mut words = line.trim().trim_start_matches("$ ").split_whitespace().peekable();
        while let Some(w) = words.peek() {
            if *w == "sudo" || (w.contains('=') && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())) {
                words.next();
            } else {
                break;
            }
        }
        if words.peek() == Some(&"allot") {
            out.push(words.collect::<Vec<_>>().join(" "));
        }
    };
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                in_block = Some(match kind {
                    CodeBlockKind::Fenced(lang) => lang.to_string(),
                    CodeBlockKind::Indented => String::new(),
                })
            }
            Event::End(TagEnd::CodeBlock) => in_block = None,
            Event::Text(t) if in_block.as_deref().is_some_and(|l| matches!(l, "" | "sh" | "bash" | "console" | "shell")) => {
                for line in t.lines() {
                    take(line, &mut out);
                }
            }
            Event::Code(t) => take(&t, &mut out),
            _ => {}
        }
    }
    out
}

/// The subcommands a clap help lists under "Commands:".
fn subcommands(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn every_allot_command_the_book_shows_is_one_the_cli_takes() {
    let mut helps: BTreeMap<Vec<String>, String> = BTreeMap::new();
    let mut help = |path: &[String]| -> Option<String> {
        if let Some(h) = helps.get(path) {
            return Some(h.clone());
        }
        let out = Command::new(env!("CARGO_BIN_EXE_allot")).args(path).arg("--help").output().unwrap();
        let h = out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())?;
        helps.insert(path.to_vec(), h.clone());
        Some(h)
    };
    let mut bad = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for command in allot_commands(&read(&page)) {
            // What a shell would run: up to a comment, a pipe or a redirection.
            let words: Vec<&str> =
                command.split_whitespace().skip(1).take_while(|w| !w.starts_with('#') && !matches!(*w, "|" | "&&" | ";" | ">" | "2>&1")).collect();
            let mut path: Vec<String> = Vec::new();
            let mut value_next = false;
            for w in &words {
                let h = help(&path).unwrap();
                if std::mem::take(&mut value_next) {
                    continue; // the value of an option before the subcommand (`--ledger URL sync`)
                }
                if subcommands(&h).contains(*w) {
                    path.push(w.to_string());
                } else if w.starts_with("--") {
                    value_next = !w.contains('=') && h.contains(&format!("{w} <"));
                } else if !w.starts_with('-') {
                    break;
                }
            }
            let h = help(&path).unwrap();
            checked += 1;
            if path.is_empty() && !words.iter().all(|w| w.starts_with('-')) {
                bad.push(format!("{}: `{command}`: `allot {}` is no command of allot's", shown(&page), words.first().unwrap_or(&"")));
                continue;
            }
            for flag in words.iter().filter(|w| w.starts_with("--")) {
                let name = flag.split('=').next().unwrap().trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
                let known = h.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[').any(|w| w == name);
                if !known {
                    bad.push(format!("{}: `{command}`: `allot {}` has no {name}", shown(&page), path.join(" ")));
                }
            }
        }
    }
    assert!(checked > 30, "only {checked} allot commands found in the book");
    assert!(bad.is_empty(), "{} command(s) the CLI does not take:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn every_script_the_book_names_exists() {
    let mut missing = BTreeSet::new();
    let mut seen = 0;
    for page in pages() {
        let text = read(&page);
        for piece in text.split("scripts/").skip(1) {
            let name: String = piece.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')).collect();
            if let Some(name) = name.strip_suffix(".sh").map(|n| format!("{n}.sh")) {
                seen += 1;
                if !repo().join("scripts").join(&name).is_file() {
                    missing.insert(format!("{}: scripts/{name}", shown(&page)));
                }
            }
        }
    }
    assert!(seen > 10, "{seen}");
    assert!(missing.is_empty(), "{missing:?}");
}

fn mdbook() -> PathBuf {
    let in_cargo = Path::new(&std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cargo/bin/mdbook");
    if in_cargo.is_file() {
        in_cargo
    } else {
        PathBuf::from("mdbook")
    }
}

#[test]
#[ignore = "needs mdBook: scripts/install-deps.sh --docs installs it, scripts/test.sh runs this"]
fn the_book_builds_without_a_warning_and_shows_the_shipped_files() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(mdbook())
        .args(["build", "--dest-dir"])
        .arg(out_dir.path())
        .arg(repo().join("docs"))
        .output()
        .unwrap_or_else(|e| panic!("mdbook: {e}: install it with scripts/install-deps.sh --docs"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mdbook build failed:\n{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
    assert!(warnings.is_empty(), "mdbook build warned:\n{}", warnings.join("\n"));
    // The configuration reference shows the shipped files themselves.
    let html = |page: &str| std::fs::read_to_string(out_dir.path().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
    let conf = html("admin/configuration.html");
    for line in read(&repo().join("conf/allot.conf")).lines().filter(|l| l.starts_with("LedgerPath=") || l.starts_with("SmallJobPartition=")) {
        assert!(conf.contains(line), "admin/configuration.html lacks allot.conf's {line}");
    }
    assert!(
        conf.contains("PriorityType=priority/allot") && (conf.contains("lookback = \"7d\"") || conf.contains("lookback = &quot;7d&quot;")),
        "the shipped slurm-allot.conf or [cluster] is missing"
    );
    assert!(html("manager/budgets.html").contains("[budget.vision.detection.tracking]"));
    for page in ["index.html", "researcher/contract.html", "simulator/results.html", "design/architecture.html"] {
        assert!(out_dir.path().join(page).is_file(), "{page}");
    }
}

/// Every policy setting (`allot::settings::POLICY_SETTINGS`, where each is
/// named once) is in the shipped budget's `[cluster]` table, which the
/// book's configuration reference shows, and is a flag of `allot simulate`.
#[test]
fn every_policy_setting_is_in_the_shipped_budget_the_book_shows_and_a_simulator_flag() {
    let budgets = read(&repo().join("conf/budgets.toml"));
    let cluster: Vec<&str> = budgets.lines().skip_while(|l| l.trim() != "[cluster]").skip(1).take_while(|l| !l.starts_with('[')).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_allot")).args(["simulate", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for s in &allot::settings::POLICY_SETTINGS {
        let documented = cluster.iter().any(|l| l.trim_start_matches(['#', ' ']).split(['=', ' ']).next() == Some(s.key));
        assert!(documented, "conf/budgets.toml's [cluster] does not show {}", s.key);
        assert!(help.contains(&format!("{} <", s.flag())), "allot simulate has no {}", s.flag());
    }
    let conf = read(&book_src().join("admin/configuration.md"));
    assert!(conf.contains("{{#include ../../../conf/budgets.toml:13:28}}") && cluster.len() >= 14, "the book shows the [cluster] table by these lines");
}
