//! Generates raw bindings to the Slurm whose source tree it is given
//! (slurmctld-internal headers from the tree, public ones from the tree or
//! its installed libslurm-dev), the "this release or later" cfgs of the
//! plugin ABI steps allot knows, and a C-side layout table that
//! `tests/layout.rs` checks every bound struct against.
//!
//! The tree decides everything: its version (META, cross-checked with
//! `slurm/slurm_version.h`), its layouts (bindgen and the probe read its own
//! headers, with its own `config.h` when it was configured) and the code
//! paths (`cfg(slurm_ge_25_05)` and so on, one per ABI step in
//! [`ABI_STEPS`]). No row per micro release: any micro version of a
//! release allot knows builds, and the plugins carry exactly that version.
//!
//! Inputs (environment):
//! - `SLURM_SRC_DIR`: the Slurm source tree slurmctld was built from. A
//!   configured tree (SchedMD's tarball after `./configure`, an rpmbuild
//!   BUILD directory) is complete on its own. An unconfigured one (Debian's
//!   `apt-get source`) needs `SLURM_INCLUDE_DIR` too.
//! - `SLURM_BUILD_DIR`: where `./configure` ran, for out-of-tree builds
//!   (it holds `config.h` and `slurm/slurm_version.h`); default `SLURM_SRC_DIR`.
//! - `SLURM_INCLUDE_DIR`: installed public headers of the same version
//!   (`slurm/slurm.h`, `slurm/slurm_version.h`: libslurm-dev, slurm-devel).
//! - `ALLOT_SLURM_RELEASE`: without `SLURM_SRC_DIR`, one of the releases of
//!   the repository's own test table (`scripts/release.sh`), whose tree and
//!   headers `scripts/install-deps.sh` put in place; default 22.05.
//! - `LIBCLANG_PATH`: honoured by bindgen (clang-sys) if libclang is not in a
//!   standard place.
//!
//! Outputs in `OUT_DIR`: `bindings.rs`, `version.rs`, `layout_checks.rs`;
//! `cargo:rustc-cfg=slurm_ge_X_Y` for every ABI step the tree is at or past,
//! and link metadata for dependents' build scripts (`links = "slurm"`):
//! `DEP_SLURM_ABI_CFGS` (those cfgs, comma-separated), `DEP_SLURM_ABI_KNOWN`
//! (every step's cfg, for their check-cfg) and `DEP_SLURM_VERSION`.
//!
//! A plugin targets exactly one Slurm: struct layouts of slurmctld's
//! internals change between releases and slurmctld refuses a plugin built for
//! another version (`plugin_version` must equal `SLURM_VERSION_NUMBER`).

use std::collections::HashMap;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// The oldest release allot builds for.
const OLDEST: (u32, u32) = (22, 5);

/// Each step of the plugin ABI (and of the headers) between the releases
/// allot knows, oldest first: a tree of that release or later gets the cfg.
/// What each step changed is said where its cfg is used (plugin/slurm,
/// wrapper.h). A Slurm newer than the last step is refused: its interfaces
/// have not been read. Adding a release: read its src/interfaces/*.c and
/// slurmctld.h against the last one, add a step here if anything allot uses
/// changed, and its cfg arms; `scripts/release.sh` if the test suite gets it.
const ABI_STEPS: &[AbiStep] = &[
    // Plugin interfaces move to src/interfaces; priority_p_thread_start and
    // priority_p_recover; job_modify and sprio's factors list change; lists
    // become list_t.
    AbiStep { release: (24, 11), cfg: "slurm_ge_24_11" },
    // preempt_p_get_data splits into get_grace_time/get_mode/get_prio;
    // jobcomp_p_log_record becomes record_job_end(job, event), plus record_job_start.
    AbiStep { release: (25, 5), cfg: "slurm_ge_25_05" },
    // priority_p_calc_fs_factor dropped; job_requeue becomes
    // job_requeue_external(uid, slurm_step_id_t *, ...); job ids gain a SLUID.
    AbiStep { release: (25, 11), cfg: "slurm_ge_25_11" },
    // Header and struct changes only (bindgen follows them); no plugin
    // symbol allot implements changed. A step so that code can say so.
    AbiStep { release: (26, 5), cfg: "slurm_ge_26_05" },
];

/// Releases between the oldest and the first step, whose interfaces were
/// never read against allot's: refused rather than guessed.
const UNCHECKED_BELOW_FIRST_STEP: &[(u32, u32)] = &[(23, 2), (23, 11), (24, 5)];

struct AbiStep {
    release: (u32, u32),
    cfg: &'static str,
}

/// The Slurm being built for: its version and where its headers are.
struct Tree {
    version: (u32, u32, u32),
    src_dir: PathBuf,
    /// The directory holding the tree's own `config.h` and generated
    /// `slurm/slurm_version.h` (a configured tree), if any.
    configured: Option<PathBuf>,
    /// Installed public headers (`slurm/slurm.h`), if given.
    include_dir: Option<PathBuf>,
    /// How to fix a problem with this tree, for error messages.
    fix: String,
}

impl Tree {
    fn version_string(&self) -> String {
        let (a, b, c) = self.version;
        format!("{a}.{b:02}.{c}")
    }
    fn release(&self) -> String {
        let (a, b, _) = self.version;
        format!("{a}.{b:02}")
    }
    fn version_number(&self) -> u32 {
        let (a, b, c) = self.version;
        (a << 16) | (b << 8) | c
    }
    /// The cfgs of every ABI step this tree is at or past.
    fn abi_cfgs(&self) -> Vec<&'static str> {
        let (a, b, _) = self.version;
        ABI_STEPS.iter().filter(|s| (a, b) >= s.release).map(|s| s.cfg).collect()
    }
}

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let wrapper = manifest_dir.join("wrapper.h");

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=wrapper.h");
    // The test table that names the default trees (see locate_tree).
    println!("cargo:rerun-if-changed=../scripts/release.sh");
    for var in ["ALLOT_SLURM_RELEASE", "SLURM_SRC_DIR", "SLURM_BUILD_DIR", "SLURM_INCLUDE_DIR", "ALLOT_SLURM_SRC_ROOT"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let known: Vec<&str> = ABI_STEPS.iter().map(|s| s.cfg).collect();
    println!("cargo::rustc-check-cfg=cfg({})", known.join(", "));

    let tree = locate_tree(&manifest_dir);
    check_release_is_known(&tree);
    let cfgs = tree.abi_cfgs();
    for cfg in &cfgs {
        println!("cargo:rustc-cfg={cfg}");
    }
    // For the build scripts of dependents (`links = "slurm"`): DEP_SLURM_*.
    println!("cargo:abi_cfgs={}", cfgs.join(","));
    println!("cargo:abi_known={}", known.join(","));
    println!("cargo:version={}", tree.version_string());

    // The include path, first match wins:
    // - OUT_DIR/include: for an unconfigured tree, an empty config.h (the
    //   internal headers `#include "config.h"`; nothing in the structs bound
    //   depends on what ./configure would put there, checked by the layout
    //   test against a configured tree's sizes) and `slurm` -> the installed
    //   headers, so <slurm/slurm.h> is libslurm-dev's and slurm_version.h
    //   (absent from an unconfigured tree) is found;
    // - a configured tree's build directory: its own config.h (NDEBUG
    //   included, unless built with --enable-developer) and slurm_version.h;
    // - the source tree itself, for "src/..." (and the public headers of a
    //   configured tree).
    let inc = out_dir.join("include");
    fs::create_dir_all(&inc).expect("create OUT_DIR/include");
    let _ = fs::remove_file(inc.join("config.h"));
    let link = inc.join("slurm");
    let _ = fs::remove_file(&link);
    if let Some(include_dir) = &tree.include_dir {
        std::os::unix::fs::symlink(include_dir.join("slurm"), &link).expect("symlink OUT_DIR/include/slurm");
        warn_if_public_headers_differ(&tree.src_dir, include_dir);
    }
    if tree.configured.is_none() {
        fs::write(inc.join("config.h"), "/* empty: generated by slurm-sys/build.rs in place of ./configure's config.h */\n").expect("write config.h");
    }
    let mut include_dirs = vec![inc.clone()];
    include_dirs.extend(tree.configured.clone());
    include_dirs.push(tree.src_dir.clone());
    let mut include_args: Vec<String> = include_dirs.iter().map(|d| format!("-I{}", d.display())).collect();
    if tree.configured.is_none() {
        // Debian builds Slurm with --disable-debug, whose config.h defines
        // NDEBUG: xassert() compiles away and no struct carries debug-only
        // members. A configured tree's own config.h says it itself.
        include_args.push("-DNDEBUG".to_owned());
    }

    let started = std::time::Instant::now();
    let (bindings, c_names) = generate_bindings(&tree, &wrapper, &include_args);
    fs::write(out_dir.join("bindings.rs"), &bindings).expect("write bindings.rs");
    // Visible with `cargo build -vv`; handy when tuning the allowlists.
    println!(
        "slurm-sys: Slurm {} ({}): bindings.rs {} bytes, generated in {:.2?}",
        tree.version_string(),
        tree.src_dir.display(),
        bindings.len(),
        started.elapsed()
    );

    fs::write(
        out_dir.join("version.rs"),
        format!(
            "/// `SLURM_VERSION_NUMBER` of the Slurm these bindings were generated from\n\
             /// (its source tree's META and slurm_version.h). A plugin's `plugin_version`\n\
             /// must equal it or slurmctld refuses the plugin.\n\
             pub const SLURM_VERSION_NUMBER: u32 = {:#08x};\n\
             /// The same version as text, as `slurmctld -V` prints it.\n\
             pub const SLURM_VERSION_STRING: &str = \"{}\";\n\
             /// The release (major.minor).\n\
             pub const SLURM_RELEASE: &str = \"{}\";\n\
             /// The ABI steps this Slurm is at or past (`cfg(slurm_ge_...)`).\n\
             pub const SLURM_ABI_CFGS: &[&str] = &{:?};\n\
             /// The source tree the bindings were generated from.\n\
             pub const SLURM_SOURCE_TREE: &str = {:?};\n\
             /// Whether that tree was configured (its own config.h was used).\n\
             pub const SLURM_TREE_CONFIGURED: bool = {};\n",
            tree.version_number(),
            tree.version_string(),
            tree.release(),
            cfgs,
            tree.src_dir.display().to_string(),
            tree.configured.is_some(),
        ),
    )
    .expect("write version.rs");

    layout_probe(&tree, &bindings, &c_names, &wrapper, &include_dirs, &out_dir);
}

fn env_path(var: &str) -> Option<PathBuf> {
    env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from)
}

fn fail(msg: String) -> ! {
    // Cargo shows a failed build script's stderr; exiting (rather than
    // panicking) keeps a backtrace from burying the message.
    eprintln!("\nslurm-sys: error: {msg}\n");
    std::process::exit(1);
}

/// The tree to build for: `SLURM_SRC_DIR` (a site's own), or a release of
/// the repository's test table (`ALLOT_SLURM_RELEASE`, scripts/release.sh).
fn locate_tree(manifest_dir: &Path) -> Tree {
    let site_fix = "point SLURM_SRC_DIR at the Slurm source tree your slurmctld was built from, configured as it was \
                    (./configure with the same options; see \"Build for your site\" in allot's docs/src/admin/slurm-releases.md)";
    let (src_dir, include_dir, fix) = match env_path("SLURM_SRC_DIR") {
        Some(src) => (src, env_path("SLURM_INCLUDE_DIR"), site_fix.to_owned()),
        None => {
            let release = env::var("ALLOT_SLURM_RELEASE").ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
            // scripts/release.sh knows which release is the default.
            let release = release.unwrap_or_else(|| "default".to_owned());
            let script = manifest_dir.join("../scripts/release.sh");
            if !script.is_file() {
                fail(format!("SLURM_SRC_DIR is not set: {site_fix}."));
            }
            let field = |name: &str| -> String {
                let out = Command::new("bash").arg(&script).args([&release, name]).output();
                match out {
                    Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
                    Ok(o) => fail(format!(
                        "ALLOT_SLURM_RELEASE={release}: {}; to build for a Slurm of your own, {site_fix}.",
                        String::from_utf8_lossy(&o.stderr).trim()
                    )),
                    Err(e) => fail(format!("running {}: {e}", script.display())),
                }
            };
            let src = PathBuf::from(field("src"));
            let include = env_path("SLURM_INCLUDE_DIR").or_else(|| Some(field("include")).filter(|s| !s.is_empty()).map(PathBuf::from));
            let fix = format!("install it with `sudo scripts/install-deps.sh --slurm {release}` (from the repository root), or {site_fix}");
            (src, include, fix)
        }
    };
    let header = src_dir.join("src/slurmctld/slurmctld.h");
    if !header.is_file() {
        fail(format!(
            "the Slurm source tree is missing: {} does not exist.\nslurm-sys needs Slurm's internal headers \
             (job_record_t lives in src/slurmctld/slurmctld.h): {fix}.",
            header.display()
        ));
    }
    let version = meta_version(&src_dir, &fix);
    let build_dir = env_path("SLURM_BUILD_DIR").unwrap_or_else(|| src_dir.clone());
    let configured = (build_dir.join("config.h").is_file() && build_dir.join("slurm/slurm_version.h").is_file()).then_some(build_dir.clone());
    let tree = Tree { version, src_dir, configured, include_dir, fix };
    if tree.configured.is_none() && tree.include_dir.is_none() {
        fail(format!(
            "{} is not a configured Slurm tree (no config.h and slurm/slurm_version.h in {}) and SLURM_INCLUDE_DIR is \
             not set. Either run ./configure in it with the options your slurmctld was built with (set SLURM_BUILD_DIR \
             if it ran elsewhere), or set SLURM_INCLUDE_DIR to the installed headers of Slurm {} (libslurm-dev, \
             slurm-devel: the directory holding slurm/slurm.h).",
            tree.src_dir.display(),
            build_dir.display(),
            tree.version_string()
        ));
    }
    if let Some(dir) = &tree.configured {
        check_version_header(&tree, &dir.join("slurm/slurm_version.h"));
    }
    if let Some(dir) = &tree.include_dir {
        check_version_header(&tree, &dir.join("slurm/slurm_version.h"));
        for h in ["slurm.h", "slurm_errno.h"] {
            if !dir.join("slurm").join(h).is_file() {
                fail(format!("{}/slurm/{h} is missing; {}", dir.display(), tree.fix));
            }
        }
    }
    tree
}

/// The tree's version, from its META file.
fn meta_version(src_dir: &Path, fix: &str) -> (u32, u32, u32) {
    let meta_path = src_dir.join("META");
    let meta = fs::read_to_string(&meta_path).unwrap_or_else(|e| fail(format!("cannot read {}: {e}; {fix}", meta_path.display())));
    let field = |name: &str| -> Option<u32> {
        meta.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(name)).then(|| words.next().and_then(|v| v.parse().ok())).flatten()
        })
    };
    match (field("Major:"), field("Minor:"), field("Micro:")) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => fail(format!("{} names no Major:, Minor: and Micro: version: is this a Slurm source tree? {fix}", meta_path.display())),
    }
}

/// A slurm_version.h the build reads must be the tree's own version: a
/// plugin built against another is refused by slurmctld, or misreads it.
fn check_version_header(tree: &Tree, version_h: &Path) {
    let want = tree.version_string();
    let want_number = tree.version_number();
    let text = fs::read_to_string(version_h)
        .unwrap_or_else(|e| fail(format!("cannot read {} ({e}): the Slurm {want} headers are not there; {}.", version_h.display(), tree.fix)));
    let number = text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("#define")?.trim_start();
        let value = rest.strip_prefix("SLURM_VERSION_NUMBER")?.trim();
        u32::from_str_radix(value.trim_start_matches("0x"), 16).ok()
    });
    if number != Some(want_number) {
        fail(format!(
            "{} has SLURM_VERSION_NUMBER {}, but the source tree {} is Slurm {want} ({want_number:#08x}, its META): \
             the headers and the tree must be the same Slurm, micro version included. {}.",
            version_h.display(),
            number.map_or_else(|| "(none)".to_owned(), |n| format!("{n:#08x}")),
            tree.src_dir.display(),
            tree.fix
        ));
    }
}

/// Refuses a Slurm whose plugin interfaces allot has not read.
fn check_release_is_known(tree: &Tree) {
    let (a, b, _) = tree.version;
    let newest = ABI_STEPS.last().expect("at least one step").release;
    let name = |(a, b): (u32, u32)| format!("{a}.{b:02}");
    let span = format!("allot builds for Slurm {} and {} to {}", name(OLDEST), name(ABI_STEPS[0].release), name(newest));
    if (a, b) < OLDEST || UNCHECKED_BELOW_FIRST_STEP.contains(&(a, b)) {
        fail(format!(
            "the Slurm tree {} is {}: {span} (any micro version). Its plugin interfaces were never checked against \
             allot's, so no plugin is built that could misread a struct.",
            tree.src_dir.display(),
            tree.version_string()
        ));
    }
    if (a, b) > newest {
        fail(format!(
            "the Slurm tree {} is {}, newer than any release whose plugin interfaces allot has read: {span}. A newer \
             allot may support it; to add it yourself, see ABI_STEPS in slurm-sys/build.rs.",
            tree.src_dir.display(),
            tree.version_string()
        ));
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

fn generate_bindings(tree: &Tree, wrapper: &Path, clang_args: &[String]) -> (String, HashMap<String, String>) {
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
        // running_in_slurmctld() is a function before 25.05, then a macro
        // over run_in_daemon(IS_SLURMCTLD).
        .allowlist_function("running_in_slurmctld|run_in_daemon")
        .allowlist_var("IS_SLURMCTLD")
        .allowlist_function("job_signal|job_requeue|queue_job_scheduler|find_job_record")
        .allowlist_function("slurm_strerror|slurm_bit_test|slurm_bit_ffs|slurm_bit_fls|slurm_destroy_priority_factors_object|slurm_destroy_priority_factors")
        // --- variables and macros ------------------------------------------
        .allowlist_var("job_list|part_list|last_job_update|node_record_table_ptr|node_record_count")
        .allowlist_var("slurm_conf")
        .allowlist_var("SLURM_SUCCESS|SLURM_ERROR")
        .allowlist_var("NO_VAL.*|INFINITE.*|NICE_OFFSET")
        .allowlist_var("JOB_.*|NODE_STATE_.*|PREEMPT_MODE_.*|KILL_.*|DEBUG_FLAG_.*")
        .allowlist_var("ESLURM_.*|SLURM_NO_CHANGE_IN_DATA")
        .allowlist_var("PART_FLAG_.*|PARTITION_.*")
        // Indices into a job's tres_alloc_cnt (an unnamed enum in slurmctld.h).
        .allowlist_var("TRES_ARRAY_.*")
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
    let fix = &tree.fix;
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
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate", "do", "dyn", "else", "enum", "extern", "false", "final", "fn",
    "for", "gen", "if", "impl", "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref", "return", "self", "static",
    "struct", "super", "trait", "true", "try", "type", "typeof", "union", "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
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
fn layout_probe(tree: &Tree, bindings: &str, c_names: &HashMap<String, String>, wrapper: &Path, include_dirs: &[PathBuf], out_dir: &Path) {
    let items = probed_items(bindings, c_names);
    let mut c = String::from("/* generated by slurm-sys/build.rs */\n#include <stddef.h>\n#include <stdio.h>\n");
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

    let fix = &tree.fix;
    let mut build = cc::Build::new();
    build.includes(include_dirs);
    if tree.configured.is_none() {
        build.define("NDEBUG", None); // as for bindgen (see main)
    }
    let compiler = build.cargo_metadata(false).warnings(false).try_get_compiler().unwrap_or_else(|e| fail(format!("no C compiler found ({e}); {fix}")));
    let mut cmd = compiler.to_command();
    cmd.arg(&probe_c).arg("-o").arg(&probe_exe);
    // The command without the environment cargo passes (pages of it).
    let shown = std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ");
    let output = cmd.output().unwrap_or_else(|e| fail(format!("running {shown}: {e}; {fix}")));
    if !output.status.success() {
        fail(format!("the C layout probe did not compile ({}): {shown}\n{}", output.status, String::from_utf8_lossy(&output.stderr)));
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
