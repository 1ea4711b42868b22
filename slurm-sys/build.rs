//! Generates raw bindings to Slurm 22.05.8 (public headers from libslurm-dev,
//! slurmctld-internal headers from the Slurm source tree) and a C-side
//! layout table that `tests/layout.rs` checks the bindings against.
//!
//! Inputs (environment):
//! - `SLURM_SRC_DIR`: the unpacked Slurm source tree; default
//!   `/usr/local/src/allot/slurm-wlm-22.05.8`, which
//!   `scripts/install-deps.sh` creates.
//! - `SLURM_INCLUDE_DIR`: where `slurm/slurm.h` and `slurm/slurm_version.h`
//!   are installed (libslurm-dev); default `/usr/include`.
//! - `LIBCLANG_PATH`: honoured by bindgen (clang-sys) if libclang is not in a
//!   standard place.
//!
//! Outputs in `OUT_DIR`: `bindings.rs`, `version.rs`, `layout_checks.rs`.
//!
//! The crate targets exactly one Slurm: struct layouts of slurmctld's
//! internals change between releases and a plugin built for another version
//! is refused by slurmctld (`plugin_version` must equal
//! `SLURM_VERSION_NUMBER`), so any other version is an error here.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const EXPECTED_VERSION: (u32, u32, u32) = (22, 5, 8);
const EXPECTED_VERSION_NUMBER: u32 = 0x16_05_08;
const EXPECTED_VERSION_STRING: &str = "22.05.8";
const DEFAULT_SRC_DIR: &str = "/usr/local/src/allot/slurm-wlm-22.05.8";
const DEFAULT_INCLUDE_DIR: &str = "/usr/include";
const FIX: &str = "install the build prerequisites with `sudo scripts/install-deps.sh` \
                   (from the repository root)";

/// Structs (and fields) whose layout the plugins rely on. build.rs emits a C
/// probe that records `sizeof`/`offsetof` for each, and a Rust table pairing
/// those numbers with `size_of`/`offset_of!` on the bindings; tests/layout.rs
/// asserts they agree. Add a field here before a plugin starts to read it.
#[rustfmt::skip]
const LAYOUT: &[(&str, &[&str])] = &[
    (
        "job_record_t",
        &[
            "magic", "account", "admin_comment", "array_job_id", "array_task_id", "assoc_id",
            "assoc_ptr", "batch_flag", "bit_flags", "comment", "details", "direct_set_prio",
            "end_time", "gres_list_req", "gres_list_alloc", "group_id", "het_job_id", "job_id",
            "job_resrcs", "job_state", "last_sched_eval", "name", "nodes", "node_bitmap",
            "node_cnt", "partition", "part_ptr_list", "part_ptr", "pre_sus_time", "preempt_time",
            "preempt_in_progress", "priority", "priority_array", "prio_factors", "qos_id",
            "qos_ptr", "restart_cnt", "resize_time", "start_time", "state_desc", "state_reason",
            "suspend_time", "system_comment", "time_limit", "time_min", "tot_sus_time",
            "total_cpus", "tres_per_job", "tres_per_node", "tres_per_task", "tres_req_cnt",
            "tres_req_str", "tres_alloc_cnt", "tres_alloc_str", "user_id", "user_name", "wckey",
        ],
    ),
    (
        "job_details_t",
        &[
            "accrue_time", "begin_time", "cpus_per_task", "features", "max_nodes", "min_cpus",
            "min_nodes", "num_tasks", "requeue", "submit_time", "work_dir",
        ],
    ),
    (
        "job_desc_msg_t",
        &[
            "account", "array_inx", "begin_time", "bitflags", "comment", "group_id", "max_nodes",
            "min_nodes", "name", "num_tasks", "partition", "priority", "qos", "requeue", "script",
            "time_limit", "time_min", "tres_per_job", "tres_per_node", "tres_per_socket",
            "tres_per_task", "user_id", "warn_flags", "warn_signal", "warn_time", "work_dir",
        ],
    ),
    (
        "part_record_t",
        &[
            "flags", "grace_time", "name", "node_bitmap", "nodes", "preempt_mode",
            "priority_job_factor", "priority_tier", "state_up", "total_cpus", "total_nodes",
        ],
    ),
    (
        "node_record_t",
        &["comment", "cpus", "gres", "gres_list", "index", "name", "node_state", "real_memory"],
    ),
    (
        "job_queue_rec_t",
        &["array_task_id", "job_id", "job_ptr", "part_ptr", "priority", "resv_ptr"],
    ),
    ("slurmctld_lock_t", &["conf", "job", "node", "part", "fed"]),
    ("gres_state_t", &["config_flags", "plugin_id", "gres_data", "gres_name", "state_type"]),
    (
        "gres_job_state_t",
        &[
            "type_id", "type_name", "flags", "gres_per_job", "gres_per_node", "gres_per_socket",
            "gres_per_task", "total_gres", "node_cnt", "gres_cnt_node_alloc",
        ],
    ),
    (
        "priority_factors_object_t",
        &[
            "cluster_name", "job_id", "partition", "user_id", "priority_age", "priority_fs",
            "priority_site", "tres_cnt", "nice",
        ],
    ),
    ("priority_factors_request_msg_t", &["job_id_list", "partitions", "uid_list"]),
    (
        "slurm_conf_t",
        &[
            "cluster_name", "debug_flags", "job_comp_type", "job_submit_plugins", "plugindir", "preempt_mode",
            "preempt_type", "priority_type", "sched_params", "slurmctld_params", "slurm_user_id",
        ],
    ),
];

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let wrapper = manifest_dir.join("wrapper.h");

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=SLURM_SRC_DIR");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");

    let src_dir = env_path("SLURM_SRC_DIR", DEFAULT_SRC_DIR);
    let include_dir = env_path("SLURM_INCLUDE_DIR", DEFAULT_INCLUDE_DIR);
    check_source_tree(&src_dir);
    check_installed_headers(&include_dir);

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
    generate_bindings(&wrapper, &include_args, &out_dir);
    let elapsed = started.elapsed();
    let size = fs::metadata(out_dir.join("bindings.rs"))
        .map(|m| m.len())
        .unwrap_or(0);
    // Visible with `cargo build -vv`; handy when tuning the allowlists.
    println!("slurm-sys: bindings.rs {size} bytes, generated in {elapsed:.2?}");

    fs::write(
        out_dir.join("version.rs"),
        format!(
            "/// `SLURM_VERSION_NUMBER` of the Slurm these bindings were generated from\n\
             /// (checked at build time against the source tree and libslurm-dev). A plugin's\n\
             /// `plugin_version` must equal it or slurmctld refuses the plugin.\n\
             pub const SLURM_VERSION_NUMBER: u32 = {EXPECTED_VERSION_NUMBER:#08x};\n\
             /// The same version as text, as `slurmctld -V` prints it.\n\
             pub const SLURM_VERSION_STRING: &str = \"{EXPECTED_VERSION_STRING}\";\n"
        ),
    )
    .expect("write version.rs");

    layout_probe(&wrapper, &inc, &src_dir, &out_dir);
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

/// The source tree must exist and be 22.05.8 (its META file).
fn check_source_tree(src_dir: &Path) {
    let header = src_dir.join("src/slurmctld/slurmctld.h");
    if !header.is_file() {
        fail(format!(
            "the Slurm source tree is missing: {} does not exist.\n\
             slurm-sys needs Slurm's internal headers (job_record_t lives in \
             src/slurmctld/slurmctld.h). Set SLURM_SRC_DIR to an unpacked slurm-wlm \
             {EXPECTED_VERSION_STRING} source tree, or {FIX}.",
            header.display()
        ));
    }
    let meta_path = src_dir.join("META");
    let meta = fs::read_to_string(&meta_path)
        .unwrap_or_else(|e| fail(format!("cannot read {}: {e}; {FIX}", meta_path.display())));
    let field = |name: &str| -> Option<String> {
        meta.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(name)).then(|| words.next().unwrap_or("").to_owned())
        })
    };
    let num = |name: &str| field(name).and_then(|v| v.parse::<u32>().ok());
    let found = (num("Major:"), num("Minor:"), num("Micro:"));
    let (major, minor, micro) = EXPECTED_VERSION;
    if found != (Some(major), Some(minor), Some(micro)) {
        fail(format!(
            "the Slurm source tree {} is version {} (META), but slurm-sys targets Slurm \
             {EXPECTED_VERSION_STRING} exactly: struct layouts differ between Slurm releases. \
             Point SLURM_SRC_DIR at a {EXPECTED_VERSION_STRING} tree, or {FIX}.",
            src_dir.display(),
            field("Version:").unwrap_or_else(|| "unknown".into()),
        ));
    }
}

/// libslurm-dev must be installed and be 22.05.8 (slurm_version.h).
fn check_installed_headers(include_dir: &Path) {
    let version_h = include_dir.join("slurm/slurm_version.h");
    let text = fs::read_to_string(&version_h).unwrap_or_else(|e| {
        fail(format!(
            "cannot read {} ({e}): libslurm-dev is not installed. Set SLURM_INCLUDE_DIR to \
             where slurm/slurm.h lives, or {FIX}.",
            version_h.display()
        ))
    });
    let number = text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("#define")?.trim_start();
        let value = rest.strip_prefix("SLURM_VERSION_NUMBER")?.trim();
        u32::from_str_radix(value.trim_start_matches("0x"), 16).ok()
    });
    if number != Some(EXPECTED_VERSION_NUMBER) {
        fail(format!(
            "{} has SLURM_VERSION_NUMBER {}, but slurm-sys targets Slurm {EXPECTED_VERSION_STRING} \
             ({EXPECTED_VERSION_NUMBER:#08x}) exactly; a plugin built against another version \
             is refused by slurmctld. Install Debian bookworm's libslurm-dev 22.05.8, or {FIX}.",
            version_h.display(),
            number.map_or_else(|| "(none)".to_owned(), |n| format!("{n:#08x}")),
        ));
    }
    for h in ["slurm.h", "slurm_errno.h"] {
        if !include_dir.join("slurm").join(h).is_file() {
            fail(format!(
                "{}/slurm/{h} is missing; {FIX}",
                include_dir.display()
            ));
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

fn generate_bindings(wrapper: &Path, clang_args: &[String], out_dir: &Path) {
    let builder = bindgen::Builder::default()
        .header(wrapper.to_string_lossy())
        .clang_args(clang_args)
        .rust_target(bindgen::RustTarget::stable(80, 0).expect("a known Rust version"))
        // Every included header becomes a rerun-if-changed (and bindgen's env vars).
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .parse_callbacks(Box::new(MacroTypes))
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
        .clang_macro_fallback_build_dir(out_dir) // its scratch files, not next to wrapper.h
        .sort_semantically(true)
        .merge_extern_blocks(true)
        // --- types ---------------------------------------------------------
        .allowlist_type("job_record_t|job_details_t|job_desc_msg_t|part_record_t|node_record_t")
        .allowlist_type("slurmctld_lock_t|lock_level_t|job_queue_rec_t")
        .allowlist_type("slurm_preempt_data_type_t")
        .allowlist_type("priority_factors_object_t|priority_factors_request_msg_t")
        .allowlist_type("gres_state_t|gres_job_state_t|gres_state_type_enum_t")
        .allowlist_type("slurm_conf_t|log_level_t")
        .allowlist_type("List|ListIterator|ListForF|ListFindF|ListCmpF|ListDelF")
        // Enums whose variants are the constants plugins use.
        .allowlist_type("job_states|job_state_reason|node_states|slurm_err_t")
        // --- functions -----------------------------------------------------
        .allowlist_function("lock_slurmctld|unlock_slurmctld")
        .allowlist_function("list_.*")
        .allowlist_function("slurm_xstrdup|slurm_xfree|slurm_xcalloc|xstrdup")
        .allowlist_function("log_var|error|slurm_info|slurm_verbose|get_log_level|fatal")
        .allowlist_function("running_in_slurmctld")
        .allowlist_function("job_signal|job_requeue|queue_job_scheduler|find_job_record")
        .allowlist_function("slurm_strerror|slurm_bit_test|slurm_destroy_priority_factors_object")
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
    let bindings = match generated {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => fail(format!(
            "bindgen could not parse {}: {e}.\nInclude path: {clang_args:?}. If a header is \
             missing, {FIX}.",
            wrapper.display()
        )),
        Err(_) => fail(format!(
            "bindgen failed (see its message above); the usual cause is a missing libclang: \
             {FIX} (it installs libclang-dev), or set LIBCLANG_PATH to the directory holding \
             libclang.so."
        )),
    };
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("write bindings.rs");
}

/// Compile and run a C program that prints sizeof/offsetof for every entry of
/// LAYOUT with the same headers and defines, and write `layout_checks.rs`,
/// which pairs each number with Rust's view of the same item.
fn layout_probe(wrapper: &Path, inc: &Path, src_dir: &Path, out_dir: &Path) {
    let mut c = String::from(
        "/* generated by slurm-sys/build.rs */\n#include <stddef.h>\n#include <stdio.h>\n",
    );
    writeln!(c, "#include \"{}\"", wrapper.display()).unwrap();
    c.push_str("int main(void)\n{\n");
    for (ty, fields) in LAYOUT {
        writeln!(c, "\tprintf(\"{ty} sizeof %zu\\n\", sizeof({ty}));").unwrap();
        writeln!(c, "\tprintf(\"{ty} alignof %zu\\n\", _Alignof({ty}));").unwrap();
        for f in *fields {
            writeln!(c, "\tprintf(\"{ty} {f} %zu\\n\", offsetof({ty}, {f}));").unwrap();
        }
    }
    c.push_str("\treturn 0;\n}\n");
    let probe_c = out_dir.join("layout_probe.c");
    let probe_exe = out_dir.join("layout_probe");
    fs::write(&probe_c, c).expect("write layout_probe.c");

    let compiler = cc::Build::new()
        .include(inc)
        .include(src_dir)
        .define("NDEBUG", None)
        .cargo_metadata(false)
        .warnings(false)
        .try_get_compiler()
        .unwrap_or_else(|e| fail(format!("no C compiler found ({e}); {FIX}")));
    let mut cmd = compiler.to_command();
    cmd.arg(&probe_c).arg("-o").arg(&probe_exe);
    // The command without the environment cargo passes (pages of it).
    let shown = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let status = cmd
        .status()
        .unwrap_or_else(|e| fail(format!("running {shown}: {e}; {FIX}")));
    if !status.success() {
        fail(format!(
            "the C layout probe did not compile ({status}): {shown}"
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
