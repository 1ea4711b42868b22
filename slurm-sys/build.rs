//! Generates raw bindings to one supported Slurm release (public headers from
//! that release's libslurm-dev, slurmctld-internal headers from its source
//! tree), the `cfg` naming the release, and a C-side layout table that
//! `tests/layout.rs` checks every bound struct against.
//!
//! Inputs (environment):
//! - `ALLOT_SLURM_RELEASE`: the release to build for, `22.05` (the default,
//!   Debian 12's 22.05.8) or `24.11` (Debian 13's 24.11.5). See [`RELEASES`].
//! - `SLURM_SRC_DIR`: the unpacked Slurm source tree of that release; default
//!   the release's directory under `/usr/local/src/allot`, which
//!   `scripts/install-deps.sh` fills.
//! - `SLURM_INCLUDE_DIR`: where that release's `slurm/slurm.h` and
//!   `slurm/slurm_version.h` are installed (libslurm-dev); default per release.
//! - `LIBCLANG_PATH`: honoured by bindgen (clang-sys) if libclang is not in a
//!   standard place.
//!
//! Outputs in `OUT_DIR`: `bindings.rs`, `version.rs`, `layout_checks.rs`;
//! `cargo:rustc-cfg=slurm="24.11"` (and the same for every release), and the
//! `release` link metadata (`DEP_SLURM_RELEASE` in the build scripts of the
//! crates that depend on this one, so they set the same cfg).
//!
//! A plugin targets exactly one Slurm: struct layouts of slurmctld's
//! internals change between releases and slurmctld refuses a plugin built for
//! another version (`plugin_version` must equal `SLURM_VERSION_NUMBER`), so
//! a tree or header of any other version is an error here.

use std::collections::HashMap;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// A Slurm release allot's plugins are built for.
struct Release {
    /// What `ALLOT_SLURM_RELEASE` and the `slurm` cfg call it.
    name: &'static str,
    /// The one micro version of it that allot supports (Debian's).
    version: (u32, u32, u32),
    /// The Debian suite shipping that version.
    suite: &'static str,
    /// Default `SLURM_SRC_DIR` (scripts/install-deps.sh puts it there).
    src_dir: &'static str,
    /// Default `SLURM_INCLUDE_DIR`.
    include_dir: &'static str,
}

/// Every supported release. Adding one: a row here, the header moves in
/// wrapper.h, `cfg(slurm = ...)` arms where the plugin ABI differs
/// (plugin/safe), and the release in scripts/install-deps.sh.
const RELEASES: &[Release] = &[
    Release {
        name: "22.05",
        version: (22, 5, 8),
        suite: "bookworm",
        src_dir: "/usr/local/src/allot/slurm-wlm-22.05.8",
        include_dir: "/usr/include",
    },
    Release {
        name: "24.11",
        version: (24, 11, 5),
        suite: "trixie",
        src_dir: "/usr/local/src/allot/slurm-24.11.5",
        include_dir: "/usr/local/src/allot/libslurm-dev-24.11.5/usr/include",
    },
];
const DEFAULT_RELEASE: &str = "22.05";

impl Release {
    fn version_string(&self) -> String {
        let (a, b, c) = self.version;
        format!("{a}.{b:02}.{c}")
    }
    fn version_number(&self) -> u32 {
        let (a, b, c) = self.version;
        (a << 16) | (b << 8) | c
    }
    fn fix(&self) -> String {
        format!(
            "install the build prerequisites with `sudo scripts/install-deps.sh --slurm {}` \
             (from the repository root)",
            self.name
        )
    }
}

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let wrapper = manifest_dir.join("wrapper.h");

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=ALLOT_SLURM_RELEASE");
    println!("cargo:rerun-if-env-changed=SLURM_SRC_DIR");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let names: Vec<String> = RELEASES.iter().map(|r| format!("\"{}\"", r.name)).collect();
    println!("cargo::rustc-check-cfg=cfg(slurm, values({}))", names.join(", "));

    let release = selected_release();
    println!("cargo:rustc-cfg=slurm=\"{}\"", release.name);
    // For the build scripts of dependents (`links = "slurm"`): DEP_SLURM_RELEASE.
    println!("cargo:release={}", release.name);

    let src_dir = env_path("SLURM_SRC_DIR", release.src_dir);
    let include_dir = env_path("SLURM_INCLUDE_DIR", release.include_dir);
    check_source_tree(release, &src_dir);
    check_installed_headers(release, &include_dir);

    // A private include directory that comes first on the include path:
    // - config.h: the internal headers `#include "config.h"`; nothing in the
    //   structs we bind depends on what ./configure would put there (checked
    //   by the layout test against the reference sizes of a configured tree);
    // - slurm -> $SLURM_INCLUDE_DIR/slurm: so <slurm/slurm.h> is the installed
    //   libslurm-dev header, not the source tree's copy, and slurm_version.h
    //   (absent from an unconfigured tree) is found.
    let inc = out_dir.join("include");
    fs::create_dir_all(&inc).expect("create OUT_DIR/include");
    fs::write(
        inc.join("config.h"),
        "/* empty: generated by slurm-sys/build.rs in place of ./configure's config.h */\n",
    )
    .expect("write config.h");
    let link = inc.join("slurm");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(include_dir.join("slurm"), &link)
        .expect("symlink OUT_DIR/include/slurm");
    warn_if_public_headers_differ(&src_dir, &include_dir);

    let include_args = [
        format!("-I{}", inc.display()),
        format!("-I{}", src_dir.display()),
        // Debian builds Slurm with --disable-debug: xassert() compiles away
        // and no struct carries debug-only members.
        "-DNDEBUG".to_owned(),
    ];

    let started = std::time::Instant::now();
    let (bindings, c_names) = generate_bindings(release, &wrapper, &include_args);
    fs::write(out_dir.join("bindings.rs"), &bindings).expect("write bindings.rs");
    // Visible with `cargo build -vv`; handy when tuning the allowlists.
    println!(
        "slurm-sys: Slurm {}: bindings.rs {} bytes, generated in {:.2?}",
        release.version_string(),
        bindings.len(),
        started.elapsed()
    );

    fs::write(
        out_dir.join("version.rs"),
        format!(
            "/// `SLURM_VERSION_NUMBER` of the Slurm these bindings were generated from\n\
             /// (checked at build time against the source tree and libslurm-dev). A plugin's\n\
             /// `plugin_version` must equal it or slurmctld refuses the plugin.\n\
             pub const SLURM_VERSION_NUMBER: u32 = {:#08x};\n\
             /// The same version as text, as `slurmctld -V` prints it.\n\
             pub const SLURM_VERSION_STRING: &str = \"{}\";\n\
             /// The release (`cfg(slurm = ...)`, `ALLOT_SLURM_RELEASE`).\n\
             pub const SLURM_RELEASE: &str = \"{}\";\n\
             /// The Debian suite that ships this version.\n\
             pub const DEBIAN_SUITE: &str = \"{}\";\n",
            release.version_number(),
            release.version_string(),
            release.name,
            release.suite,
        ),
    )
    .expect("write version.rs");

    layout_probe(release, &bindings, &c_names, &wrapper, &inc, &src_dir, &out_dir);
}

fn env_path(var: &str, default: &str) -> PathBuf {
    env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default))
}

fn fail(msg: String) -> ! {
    // Cargo shows a failed build script's stderr; exiting (rather than
    // panicking) keeps a backtrace from burying the message.
    eprintln!("\nslurm-sys: error: {msg}\n");
    std::process::exit(1);
}

/// `ALLOT_SLURM_RELEASE`, which must name a supported release.
fn selected_release() -> &'static Release {
    let asked = env::var("ALLOT_SLURM_RELEASE").ok().filter(|v| !v.trim().is_empty());
    let asked = asked.as_deref().map(str::trim).unwrap_or(DEFAULT_RELEASE);
    RELEASES.iter().find(|r| r.name == asked || r.version_string() == asked).unwrap_or_else(|| {
        let known: Vec<String> = RELEASES.iter().map(|r| format!("{} ({}, Debian {})", r.name, r.version_string(), r.suite)).collect();
        fail(format!("ALLOT_SLURM_RELEASE={asked} is not a Slurm release allot supports; supported: {}", known.join(", ")))
    })
}

/// The source tree must exist and be exactly the release's version (its META file).
fn check_source_tree(release: &Release, src_dir: &Path) {
    let fix = release.fix();
    let want = release.version_string();
    let header = src_dir.join("src/slurmctld/slurmctld.h");
    if !header.is_file() {
        fail(format!(
            "the Slurm source tree is missing: {} does not exist.\n\
             slurm-sys needs Slurm's internal headers (job_record_t lives in \
             src/slurmctld/slurmctld.h). Set SLURM_SRC_DIR to an unpacked Slurm \
             {want} source tree, or {fix}.",
            header.display()
        ));
    }
    let meta_path = src_dir.join("META");
    let meta = fs::read_to_string(&meta_path)
        .unwrap_or_else(|e| fail(format!("cannot read {}: {e}; {fix}", meta_path.display())));
    let field = |name: &str| -> Option<String> {
        meta.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(name)).then(|| words.next().unwrap_or("").to_owned())
        })
    };
    let num = |name: &str| field(name).and_then(|v| v.parse::<u32>().ok());
    let found = (num("Major:"), num("Minor:"), num("Micro:"));
    let (major, minor, micro) = release.version;
    if found != (Some(major), Some(minor), Some(micro)) {
        let found = match found {
            (Some(a), Some(b), Some(c)) => format!("{a}.{b:02}.{c}"),
            _ => field("Version:").unwrap_or_else(|| "unknown".into()),
        };
        fail(format!(
            "the Slurm source tree {} is version {found} (META), but this build is for Slurm \
             {want} (ALLOT_SLURM_RELEASE={}): struct layouts differ between Slurm releases. \
             Point SLURM_SRC_DIR at a {want} tree, or {fix}.",
            src_dir.display(),
            release.name,
        ));
    }
}

/// The release's libslurm-dev headers must be there and say its version (slurm_version.h).
fn check_installed_headers(release: &Release, include_dir: &Path) {
    let fix = release.fix();
    let want = release.version_string();
    let want_number = release.version_number();
    let version_h = include_dir.join("slurm/slurm_version.h");
    let text = fs::read_to_string(&version_h).unwrap_or_else(|e| {
        fail(format!(
            "cannot read {} ({e}): the Slurm {want} headers (libslurm-dev) are not there. Set \
             SLURM_INCLUDE_DIR to where slurm/slurm.h lives, or {fix}.",
            version_h.display()
        ))
    });
    let number = text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("#define")?.trim_start();
        let value = rest.strip_prefix("SLURM_VERSION_NUMBER")?.trim();
        u32::from_str_radix(value.trim_start_matches("0x"), 16).ok()
    });
    if number != Some(want_number) {
        fail(format!(
            "{} has SLURM_VERSION_NUMBER {}, but this build is for Slurm {want} \
             ({want_number:#08x}) exactly; a plugin built against another version is refused by \
             slurmctld. Install Debian {}'s libslurm-dev {want}, or {fix}.",
            version_h.display(),
            number.map_or_else(|| "(none)".to_owned(), |n| format!("{n:#08x}")),
            release.suite,
        ));
    }
    for h in ["slurm.h", "slurm_errno.h"] {
        if !include_dir.join("slurm").join(h).is_file() {
            fail(format!("{}/slurm/{h} is missing; {fix}", include_dir.display()));
        }
    }
}

/// The bindings take public structs (job_desc_msg_t...) from libslurm-dev and
/// internal ones from the source tree; if the tree's own copy of a public
/// header differs, the two halves may not describe the same Slurm.
fn warn_if_public_headers_differ(src_dir: &Path, include_dir: &Path) {
    for h in ["slurm.h", "slurm_errno.h", "slurmdb.h"] {
        let a = fs::read(src_dir.join("slurm").join(h));
        let b = fs::read(include_dir.join("slurm").join(h));
        if let (Ok(a), Ok(b)) = (a, b) {
            if a != b {
                println!(
                    "cargo:warning=slurm-sys: {}/slurm/{h} differs from the installed {}/slurm/{h}; \
                     the bindings use the installed one",
                    src_dir.display(),
                    include_dir.display()
                );
            }
        }
    }
}

/// The flags of `job_record_t::bit_flags` / `job_desc_msg_t::bitflags`
/// (uint64_t; slurm.h, "bitflags field of job_desc_msg_t"). Bound as `u64`.
#[rustfmt::skip]
const JOB_BIT_FLAGS: &[&str] = &[
    "KILL_INV_DEP", "NO_KILL_INV_DEP", "HAS_STATE_DIR", "BACKFILL_TEST", "GRES_ENFORCE_BIND",
    "TEST_NOW_ONLY", "JOB_SEND_ENV", "SPREAD_JOB", "USE_MIN_NODES", "JOB_KILL_HURRY",
    "TRES_STR_CALC", "SIB_JOB_FLUSH", "HET_JOB_FLAG", "JOB_NTASKS_SET", "JOB_CPUS_SET",
    "BF_WHOLE_NODE_TEST", "TOP_PRIO_TMP", "JOB_ACCRUE_OVER", "GRES_DISABLE_BIND",
    "JOB_WAS_RUNNING", "RESET_ACCRUE_TIME", "CRON_JOB", "JOB_MEM_SET", "JOB_RESIZED",
    "USE_DEFAULT_ACCT", "USE_DEFAULT_PART", "USE_DEFAULT_QOS", "USE_DEFAULT_WCKEY",
    "JOB_DEPENDENT", "JOB_MAGNETIC", "JOB_PART_ASSIGNED", "BACKFILL_SCHED", "BACKFILL_LAST",
    "JOB_SEND_SCRIPT",
];

/// Integer macro types. bindgen makes every non-negative macro a `u32`; the
/// ones below are compared with or returned as other C types.
#[derive(Debug)]
struct MacroTypes;

impl bindgen::callbacks::ParseCallbacks for MacroTypes {
    fn int_macro(&self, name: &str, _value: i64) -> Option<bindgen::callbacks::IntKind> {
        use bindgen::callbacks::IntKind;
        match name {
            // Plugin entry points return `int`.
            "SLURM_SUCCESS" | "SLURM_ERROR" | "ESPANK_SUCCESS" => Some(IntKind::Int),
            // Sentinels sized by their suffix, as Slurm compares them.
            "NO_VAL8" | "INFINITE8" => Some(IntKind::U8),
            "NO_VAL16" | "INFINITE16" => Some(IntKind::U16),
            "NO_VAL64" | "INFINITE64" | "NO_CONSUME_VAL64" => Some(IntKind::U64),
            // job_record_t.bit_flags is a uint64_t.
            n if JOB_BIT_FLAGS.contains(&n) => Some(IntKind::U64),
            _ => None,
        }
    }
}

/// How C spells each struct and union bindgen emits, by its Rust name: the
/// layout probe needs a name C accepts. A tagged struct with a typedef
/// (`typedef struct job_record job_record_t`) is bound under its tag, with
/// the typedef as an alias: C takes the typedef. An anonymous one
/// (`typedef struct {...} slurmctld_lock_t`) is bound under its typedef,
/// with no alias: C takes that name. A tag with no typedef at all
/// (`struct timespec`) is left out of the probe: the plugins read none.
#[derive(Debug, Default, Clone)]
struct CNames(Arc<Mutex<ItemsSeen>>);

#[derive(Debug, Default)]
struct ItemsSeen {
    /// Rust name of each struct or union, by bindgen's item id.
    compounds: HashMap<bindgen::callbacks::DiscoveredItemId, String>,
    /// A typedef naming each item id.
    aliases: HashMap<bindgen::callbacks::DiscoveredItemId, String>,
}

impl bindgen::callbacks::ParseCallbacks for CNames {
    fn new_item_found(&self, id: bindgen::callbacks::DiscoveredItemId, item: bindgen::callbacks::DiscoveredItem) {
        use bindgen::callbacks::DiscoveredItem;
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match item {
            DiscoveredItem::Struct { final_name, .. } | DiscoveredItem::Union { final_name, .. } => {
                seen.compounds.insert(id, final_name);
            }
            DiscoveredItem::Alias { alias_name, alias_for } => {
                seen.aliases.entry(alias_for).or_insert(alias_name);
            }
            _ => {}
        }
    }
}

impl CNames {
    /// Rust name -> a C spelling of the same type, for every item C can name.
    fn spellings(&self) -> HashMap<String, String> {
        let seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.compounds
            .iter()
            .filter_map(|(id, rust)| {
                let c = match seen.aliases.get(id) {
                    Some(alias) => alias.clone(),
                    None if rust.ends_with("_t") => rust.clone(),
                    None => return None,
                };
                Some((rust.clone(), c))
            })
            .collect()
    }
}

fn generate_bindings(release: &Release, wrapper: &Path, clang_args: &[String]) -> (String, HashMap<String, String>) {
    let c_names = CNames::default();
    let builder = bindgen::Builder::default()
        .header(wrapper.to_string_lossy())
        .clang_args(clang_args)
        .rust_target(bindgen::RustTarget::stable(80, 0).expect("a known Rust version"))
        // Every included header becomes a rerun-if-changed (and bindgen's env vars).
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .parse_callbacks(Box::new(MacroTypes))
        .parse_callbacks(Box::new(c_names.clone()))
        // C enums as plain integer constants: Slurm stores them in uint16_t /
        // uint32_t fields and ORs flags into them, so Rust enums would be UB.
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(false) // tests/layout.rs checks against the C compiler instead
        .generate_comments(false)
        // Most flag macros are `SLURM_BIT(n)`, a function-like macro bindgen's own
        // evaluator cannot expand; let clang evaluate those.
        .clang_macro_fallback()
        .clang_macro_fallback_build_dir(PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")))
        .sort_semantically(true)
        .merge_extern_blocks(true)
        // --- types ---------------------------------------------------------
        .allowlist_type("job_record_t|job_details_t|job_desc_msg_t|part_record_t|node_record_t")
        .allowlist_type("slurmctld_lock_t|lock_level_t|job_queue_rec_t")
        .allowlist_type("slurm_preempt_data_type_t")
        .allowlist_type("priority_factors_object_t|priority_factors_request_msg_t|priority_factors_t")
        .allowlist_type("gres_state_t|gres_job_state_t|gres_state_type_enum_t")
        .allowlist_type("slurm_conf_t|log_level_t")
        // Slurm lists: `List`/`ListIterator` in 22.05, `list_t`/`list_itr_t`
        // in 24.11, the same `struct xlist`/`struct listIterator` underneath.
        .allowlist_type("xlist|listIterator|List|ListIterator|list_t|list_itr_t|ListForF|ListFindF|ListCmpF|ListDelF")
        // Enums whose variants are the constants plugins use.
        .allowlist_type("job_states|job_state_reason|node_states|slurm_err_t")
        // --- functions -----------------------------------------------------
        .allowlist_function("lock_slurmctld|unlock_slurmctld")
        .allowlist_function("list_.*")
        .allowlist_function("slurm_xstrdup|slurm_xfree|slurm_xcalloc|xstrdup")
        .allowlist_function("log_var|error|slurm_info|slurm_verbose|get_log_level|fatal")
        .allowlist_function("running_in_slurmctld")
        .allowlist_function("job_signal|job_requeue|queue_job_scheduler|find_job_record")
        .allowlist_function("slurm_strerror|slurm_bit_test|slurm_destroy_priority_factors_object|slurm_destroy_priority_factors")
        // --- variables and macros ------------------------------------------
        .allowlist_var("job_list|part_list|last_job_update|node_record_table_ptr|node_record_count")
        .allowlist_var("slurm_conf")
        .allowlist_var("SLURM_SUCCESS|SLURM_ERROR")
        .allowlist_var("NO_VAL.*|INFINITE.*|NICE_OFFSET")
        .allowlist_var("JOB_.*|NODE_STATE_.*|PREEMPT_MODE_.*|KILL_.*|DEBUG_FLAG_.*")
        .allowlist_var("ESLURM_.*|SLURM_NO_CHANGE_IN_DATA")
        .allowlist_var("PART_FLAG_.*|PARTITION_.*")
        .allowlist_var(JOB_BIT_FLAGS.join("|"))
        // build.rs emits these itself (version.rs), after checking them.
        .blocklist_item("SLURM_VERSION_NUMBER|SLURM_VERSION_STRING")
        // `long double` has no Rust type. It appears only in the association
        // and QOS usage records (usage_raw, usage_efctv, level_fs...), which
        // job_record_t reaches through assoc_ptr->usage and qos_ptr->usage.
        // Keep them out; src/lib.rs declares both as opaque types, so the
        // pointers to them stay typed (a C shim reads them if ever needed).
        .blocklist_type("slurmdb_assoc_usage_t|slurmdb_assoc_usage|slurmdb_qos_usage_t");

    // bindgen panics when it cannot load libclang; say what to install.
    // Its message is what matters; skip the backtrace RUST_BACKTRACE may ask for.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| eprintln!("bindgen panicked: {info}")));
    let generated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.generate()));
    std::panic::set_hook(default_hook);
    let fix = release.fix();
    let bindings = match generated {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => fail(format!(
            "bindgen could not parse {}: {e}.\nInclude path: {clang_args:?}. If a header is \
             missing, {fix}.",
            wrapper.display()
        )),
        Err(_) => fail(format!(
            "bindgen failed (see its message above); the usual cause is a missing libclang: \
             {fix} (it installs libclang-dev), or set LIBCLANG_PATH to the directory holding \
             libclang.so."
        )),
    };
    (bindings.to_string(), c_names.spellings())
}

/// Rust keywords bindgen renames by appending `_` (a C field `type` is `type_`).
const RUST_KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate", "do", "dyn", "else",
    "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "macro", "match",
    "mod", "move", "mut", "override", "priv", "pub", "ref", "return", "self", "static", "struct", "super", "trait",
    "true", "try", "type", "typeof", "union", "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// One struct (or union) of the bindings and its named fields: what the
/// layout probe checks.
struct Probed {
    rust: String,
    c: String,
    /// (Rust field name, C field name)
    fields: Vec<(String, String)>,
}

/// Every struct and union in the generated bindings with a C spelling, and
/// every named field of each (bitfield units, anonymous members and padding
/// have no C name to take the offset of).
fn probed_items(bindings: &str, c_names: &HashMap<String, String>) -> Vec<Probed> {
    let file = syn::parse_file(bindings).unwrap_or_else(|e| fail(format!("cannot parse the generated bindings: {e}")));
    let mut out = Vec::new();
    for item in file.items {
        let (ident, fields) = match item {
            syn::Item::Struct(s) => (s.ident, s.fields),
            syn::Item::Union(u) => (u.ident, syn::Fields::Named(u.fields)),
            _ => continue,
        };
        let rust = ident.to_string();
        let Some(c) = c_names.get(&rust) else { continue };
        if rust.contains("__bindgen") {
            continue; // an anonymous member type: no C name
        }
        let syn::Fields::Named(named) = fields else { continue };
        let fields: Vec<(String, String)> = named
            .named
            .iter()
            .filter_map(|f| f.ident.as_ref().map(|i| i.to_string()))
            .filter(|name| !name.starts_with("_bitfield") && !name.starts_with("__bindgen") && name != "_unused")
            .map(|name| {
                let c_name = match name.strip_suffix('_') {
                    Some(base) if RUST_KEYWORDS.contains(&base) => base.to_owned(),
                    _ => name.clone(),
                };
                (name, c_name)
            })
            .collect();
        if fields.is_empty() {
            continue; // opaque: declared, never defined
        }
        out.push(Probed { rust, c: c.clone(), fields });
    }
    out.sort_by(|a, b| a.rust.cmp(&b.rust));
    out
}

/// Compile and run a C program that prints sizeof/alignof of every struct
/// and union of the bindings and the offset of each of their named fields,
/// with the same headers and defines, and write `layout_checks.rs`, which
/// pairs each number with Rust's view of the same item. Generated from the
/// bindings, so a field the plugins start to read is checked with no edit.
fn layout_probe(release: &Release, bindings: &str, c_names: &HashMap<String, String>, wrapper: &Path, inc: &Path, src_dir: &Path, out_dir: &Path) {
    let items = probed_items(bindings, c_names);
    let mut c = String::from(
        "/* generated by slurm-sys/build.rs */\n#include <stddef.h>\n#include <stdio.h>\n",
    );
    writeln!(c, "#include \"{}\"", wrapper.display()).unwrap();
    c.push_str("int main(void)\n{\n");
    // Each row is named by the C spelling, a typedef that the bindings
    // also have (as the struct or as an alias of it): `job_record_t`, the
    // name the plugins use, whatever bindgen called the struct itself.
    for item in &items {
        let ty = &item.c;
        writeln!(c, "\tprintf(\"{ty} sizeof %zu\\n\", sizeof({ty}));").unwrap();
        writeln!(c, "\tprintf(\"{ty} alignof %zu\\n\", _Alignof({ty}));").unwrap();
        for (rust_field, c_field) in &item.fields {
            writeln!(c, "\tprintf(\"{ty} {rust_field} %zu\\n\", offsetof({ty}, {c_field}));").unwrap();
        }
    }
    c.push_str("\treturn 0;\n}\n");
    let probe_c = out_dir.join("layout_probe.c");
    let probe_exe = out_dir.join("layout_probe");
    fs::write(&probe_c, c).expect("write layout_probe.c");

    let fix = release.fix();
    let compiler = cc::Build::new()
        .include(inc)
        .include(src_dir)
        .define("NDEBUG", None)
        .cargo_metadata(false)
        .warnings(false)
        .try_get_compiler()
        .unwrap_or_else(|e| fail(format!("no C compiler found ({e}); {fix}")));
    let mut cmd = compiler.to_command();
    cmd.arg(&probe_c).arg("-o").arg(&probe_exe);
    // The command without the environment cargo passes (pages of it).
    let shown = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let output = cmd
        .output()
        .unwrap_or_else(|e| fail(format!("running {shown}: {e}; {fix}")));
    if !output.status.success() {
        fail(format!(
            "the C layout probe did not compile ({}): {shown}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let output = Command::new(&probe_exe).output().expect("run layout_probe");
    assert!(output.status.success(), "layout_probe failed");
    let text = String::from_utf8(output.stdout).expect("utf-8");

    let mut rs = String::from(
        "// generated by slurm-sys/build.rs: (type, item, Rust value, C value)\n\
         pub fn layout_checks() -> Vec<(&'static str, &'static str, usize, usize)> {\n\
         \x20   vec![\n",
    );
    for line in text.lines() {
        let mut w = line.split_whitespace();
        let (ty, item, value) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
        let rust = match item {
            "sizeof" => format!("::std::mem::size_of::<{ty}>()"),
            "alignof" => format!("::std::mem::align_of::<{ty}>()"),
            field => format!("::std::mem::offset_of!({ty}, {field})"),
        };
        writeln!(rs, "        (\"{ty}\", \"{item}\", {rust}, {value}),").unwrap();
    }
    rs.push_str("    ]\n}\n");
    fs::write(out_dir.join("layout_checks.rs"), rs).expect("write layout_checks.rs");
}
