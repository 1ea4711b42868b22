//! The bindings must agree with the C compiler on every struct size, alignment
//! and field offset: a wrong offset in `job_record_t` means a plugin silently
//! reads another field inside slurmctld.
//!
//! build.rs compiles `layout_probe.c` (generated from the bindings
//! themselves: every struct and union C can name, and every named field of
//! each, with the same headers and `-DNDEBUG` bindgen saw) and writes
//! `layout_checks.rs`: one `(type, item, Rust value, C value)` row per
//! size/alignment/offset.
#![allow(non_camel_case_types)]

use slurm_sys::*;

include!(concat!(env!("OUT_DIR"), "/layout_checks.rs"));

#[test]
fn rust_layouts_match_the_c_compiler() {
    let checks = layout_checks();
    assert!(checks.len() > 1000, "the layout table looks truncated: {} rows", checks.len());
    let mismatches: Vec<String> =
        checks.iter().filter(|(_, _, rust, c)| rust != c).map(|(ty, item, rust, c)| format!("{ty}.{item}: Rust {rust}, C {c}")).collect();
    assert!(mismatches.is_empty(), "layout mismatches:\n{}", mismatches.join("\n"));
}

/// The C probe's value of `ty`'s `item` (its field, `sizeof` or `alignof`).
fn c(ty: &str, item: &str) -> usize {
    layout_checks()
        .into_iter()
        .find(|(t, i, _, _)| *t == ty && *i == item)
        .map(|(_, _, _, c)| c)
        .unwrap_or_else(|| panic!("{ty}.{item} missing from the C probe"))
}

/// Every struct the plugins name (`sys::X_t` in plugin/*/src), with every
/// named field the bindings give it, is in the probe: the list comes from the
/// plugins' own sources, so a struct a plugin starts to read is checked
/// without anyone adding it here.
#[test]
fn the_probe_covers_every_field_of_every_struct_the_plugins_name() {
    let bindings = include_str!(concat!(env!("OUT_DIR"), "/bindings.rs"));
    let plugins = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin");
    let mut named = std::collections::BTreeSet::new();
    for krate in std::fs::read_dir(&plugins).unwrap() {
        let src = krate.unwrap().path().join("src");
        for file in std::fs::read_dir(&src).into_iter().flatten() {
            let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
            for piece in text.split("sys::").skip(1) {
                let name: String = piece.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if name.ends_with("_t") {
                    named.insert(name);
                } else if let Some(rest) = bindings.split(&format!("pub static mut {name}: ")[..]).nth(1) {
                    // A global the plugins read (`sys::slurm_conf`): its type.
                    named.insert(rest.split(';').next().unwrap().trim().to_owned());
                }
            }
        }
    }
    // The struct behind a name: itself, or what `pub type NAME = OTHER;` names.
    let body_of = |name: &str| -> Option<&str> {
        let target = bindings.split(&format!("pub type {name} = ")[..]).nth(1).map(|rest| rest.split(';').next().unwrap().trim()).unwrap_or(name);
        let start = bindings.find(&format!("pub struct {target} {{")).or_else(|| bindings.find(&format!("pub union {target} {{")))?;
        Some(bindings[start..].split("\n}").next().unwrap())
    };
    let checks = layout_checks();
    let mut structs = 0;
    for name in &named {
        let Some(body) = body_of(name) else { continue }; // an integer or enum type: nothing to lay out
        structs += 1;
        let fields: Vec<&str> = body
            .lines()
            .skip(1) // `pub struct NAME {`
            .filter_map(|l| l.trim().strip_prefix("pub ")?.split(':').next())
            .filter(|f| !f.starts_with("_bitfield") && !f.starts_with("__bindgen"))
            .collect();
        assert!(!fields.is_empty(), "{name}: no fields in the bindings");
        c(name, "sizeof");
        let probed: std::collections::BTreeSet<&str> = checks.iter().filter(|(t, ..)| t == name).map(|(_, i, ..)| *i).collect();
        let missing: Vec<&&str> = fields.iter().filter(|f| !probed.contains(**f)).collect();
        assert!(missing.is_empty(), "{name}: fields the plugins may read that the probe leaves out: {missing:?}");
    }
    assert!(named.contains("job_record_t") && named.contains("slurm_conf_t") && structs >= 10, "only {structs} structs found in plugin/*/src ({named:?})");
}

/// Reference values from a fully configured 22.05.8 build (Debian's
/// slurm-wlm 22.05.8-4+deb12u3): if these move, the unconfigured-tree
/// shortcut in build.rs (empty config.h) no longer gives slurmctld's layout.
#[test]
fn reference_layouts_of_a_configured_slurm_22_05_8() {
    use std::mem::{offset_of, size_of};
    if SLURM_VERSION_NUMBER != 0x16_05_08 {
        return; // another Slurm: the layout probe above is its check
    }
    assert_eq!(size_of::<job_record_t>(), 1048);
    assert_eq!(offset_of!(job_record_t, comment), 144);
    assert_eq!(offset_of!(job_record_t, details), 208);
    assert_eq!(size_of::<job_desc_msg_t>(), 880);
    assert_eq!(offset_of!(job_desc_msg_t, comment), 120);
    // The C probe agrees with the same numbers.
    assert_eq!(c("job_record_t", "sizeof"), 1048);
    assert_eq!(c("job_record_t", "comment"), 144);
    assert_eq!(c("job_record_t", "details"), 208);
    assert_eq!(c("job_desc_msg_t", "sizeof"), 880);
    assert_eq!(c("job_desc_msg_t", "comment"), 120);
}

/// Reference values from a 24.11.5 tree configured as Debian configures it
/// (`./configure --sysconfdir=/etc/slurm --with-munge --without-rpath
/// --disable-debug --enable-multiple-slurmd`: config.h then defines NDEBUG
/// and MULTIPLE_SLURMD, not HAVE_FRONT_END). The probe built against that
/// config.h printed the same 1,278 sizes, alignments and offsets as against
/// build.rs's empty one; these are five of them.
#[test]
fn reference_layouts_of_a_configured_slurm_24_11_5() {
    use std::mem::{offset_of, size_of};
    if SLURM_VERSION_NUMBER != 0x18_0b_05 {
        return; // another Slurm: the layout probe above is its check
    }
    assert_eq!(size_of::<job_record_t>(), 1160);
    assert_eq!(offset_of!(job_record_t, comment), 144);
    assert_eq!(offset_of!(job_record_t, details), 216);
    assert_eq!(size_of::<job_desc_msg_t>(), 912);
    assert_eq!(offset_of!(job_desc_msg_t, comment), 120);
    assert_eq!(c("job_record_t", "sizeof"), 1160);
    assert_eq!(c("job_record_t", "details"), 216);
    assert_eq!(c("job_desc_msg_t", "sizeof"), 912);
}

/// The version constants, the release and the ABI cfgs all describe the
/// one tree build.rs read.
#[test]
fn version_release_and_abi_cfgs_agree() {
    let (a, b, c) = (SLURM_VERSION_NUMBER >> 16, (SLURM_VERSION_NUMBER >> 8) & 0xff, SLURM_VERSION_NUMBER & 0xff);
    assert_eq!(SLURM_VERSION_STRING, format!("{a}.{b:02}.{c}"));
    assert_eq!(SLURM_RELEASE, format!("{a}.{b:02}"));
    let steps = [("slurm_ge_24_11", (24, 11)), ("slurm_ge_25_05", (25, 5)), ("slurm_ge_25_11", (25, 11)), ("slurm_ge_26_05", (26, 5))];
    let expected: Vec<&str> = steps.iter().filter(|(_, r)| (a, b) >= *r).map(|(cfg, _)| *cfg).collect();
    assert_eq!(SLURM_ABI_CFGS, expected.as_slice());
    // The cfgs this crate was compiled with are the same ones.
    let compiled = [cfg!(slurm_ge_24_11), cfg!(slurm_ge_25_05), cfg!(slurm_ge_25_11), cfg!(slurm_ge_26_05)];
    let named: Vec<&str> = steps.iter().zip(compiled).filter(|(_, on)| *on).map(|((cfg, _), _)| *cfg).collect();
    assert_eq!(named, expected);
    // The test suite's own release, when it chose one, is what was built.
    if let Some(asked) = std::env::var("ALLOT_SLURM_RELEASE").ok().filter(|r| !r.is_empty() && std::env::var_os("SLURM_SRC_DIR").is_none()) {
        assert_eq!(SLURM_RELEASE, asked);
    }
}

/// Constants whose C type matters to the plugins' signatures and comparisons.
#[test]
fn constant_types_and_values() {
    let _: std::os::raw::c_int = SLURM_SUCCESS;
    let _: std::os::raw::c_int = SLURM_ERROR;
    assert_eq!((SLURM_SUCCESS, SLURM_ERROR), (0, -1));
    let _: u32 = NO_VAL;
    let _: u16 = NO_VAL16;
    let _: u64 = NO_VAL64;
    assert_eq!((NO_VAL, INFINITE, INFINITE16), (0xffff_fffe, 0xffff_ffff, 0xffff));
    // job_state is a uint32_t: base state in the low byte, flags above.
    assert_eq!(JOB_STATE_BASE, 0xff);
    assert_eq!((JOB_PENDING, JOB_RUNNING, JOB_SUSPENDED), (0, 1, 2));
    assert_eq!(JOB_REQUEUE, 1 << 10);
    assert_eq!(JOB_COMPLETING, 1 << 15);
    let _: u64 = JOB_WAS_RUNNING; // a job_record_t::bit_flags flag
    assert_eq!(NODE_STATE_BASE, 0xf);
    assert_eq!(NODE_STATE_DRAIN, 1 << 9);
    assert_eq!(PREEMPT_MODE_REQUEUE, 2);
    // preempt_p_get_data's questions; 25.05 gave each a symbol of its own.
    #[cfg(not(slurm_ge_25_05))]
    assert_eq!((PREEMPT_DATA_ENABLED, PREEMPT_DATA_MODE, PREEMPT_DATA_PRIO, PREEMPT_DATA_GRACE_TIME), (0, 1, 2, 3));
    assert_eq!(PREEMPT_MODE_OFF, 0);
    assert_eq!(ESLURM_INVALID_ACCOUNT, 2045);
    assert_eq!(ESLURM_ACCESS_DENIED, 2002);
    assert_eq!((READ_LOCK, WRITE_LOCK), (1, 2));
}
