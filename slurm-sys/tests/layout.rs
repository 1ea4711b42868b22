//! The bindings must agree with the C compiler on every struct size, alignment
//! and field offset the plugins use: a wrong offset in `job_record_t` means a
//! plugin silently reads another field inside slurmctld.
//!
//! build.rs compiles `layout_probe.c` (generated from its `LAYOUT` table, with
//! the same headers and `-DNDEBUG` bindgen saw) and writes `layout_checks.rs`:
//! one `(type, item, Rust value, C value)` row per size/alignment/offset.
#![allow(non_camel_case_types)]

use slurm_sys::*;

include!(concat!(env!("OUT_DIR"), "/layout_checks.rs"));

#[test]
fn rust_layouts_match_the_c_compiler() {
    let checks = layout_checks();
    assert!(
        checks.len() > 100,
        "the layout table looks truncated: {} rows",
        checks.len()
    );
    let mismatches: Vec<String> = checks
        .iter()
        .filter(|(_, _, rust, c)| rust != c)
        .map(|(ty, item, rust, c)| format!("{ty}.{item}: Rust {rust}, C {c}"))
        .collect();
    assert!(
        mismatches.is_empty(),
        "layout mismatches:\n{}",
        mismatches.join("\n")
    );
}

/// Reference values from a fully configured 22.05.8 build (Debian's
/// slurm-wlm 22.05.8-4+deb12u3): if these move, the unconfigured-tree
/// shortcut in build.rs (empty config.h) no longer gives slurmctld's layout.
#[test]
fn reference_layouts_of_a_configured_slurm_22_05_8() {
    use std::mem::{offset_of, size_of};
    assert_eq!(size_of::<job_record_t>(), 1048);
    assert_eq!(offset_of!(job_record_t, comment), 144);
    assert_eq!(offset_of!(job_record_t, details), 208);
    assert_eq!(size_of::<job_desc_msg_t>(), 880);
    assert_eq!(offset_of!(job_desc_msg_t, comment), 120);
    // The C probe agrees with the same numbers.
    let c = |ty: &str, item: &str| {
        layout_checks()
            .into_iter()
            .find(|(t, i, _, _)| *t == ty && *i == item)
            .map(|(_, _, _, c)| c)
            .unwrap_or_else(|| panic!("{ty}.{item} missing from the C probe"))
    };
    assert_eq!(c("job_record_t", "sizeof"), 1048);
    assert_eq!(c("job_record_t", "comment"), 144);
    assert_eq!(c("job_record_t", "details"), 208);
    assert_eq!(c("job_desc_msg_t", "sizeof"), 880);
    assert_eq!(c("job_desc_msg_t", "comment"), 120);
}

#[test]
fn version_is_22_05_8() {
    assert_eq!(SLURM_VERSION_NUMBER, 0x16_05_08);
    assert_eq!(SLURM_VERSION_STRING, "22.05.8");
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
    assert_eq!(
        (NO_VAL, INFINITE, INFINITE16),
        (0xffff_fffe, 0xffff_ffff, 0xffff)
    );
    // job_state is a uint32_t: base state in the low byte, flags above.
    assert_eq!(JOB_STATE_BASE, 0xff);
    assert_eq!((JOB_PENDING, JOB_RUNNING, JOB_SUSPENDED), (0, 1, 2));
    assert_eq!(JOB_REQUEUE, 1 << 10);
    assert_eq!(JOB_COMPLETING, 1 << 15);
    let _: u64 = JOB_WAS_RUNNING; // a job_record_t::bit_flags flag
    assert_eq!(NODE_STATE_BASE, 0xf);
    assert_eq!(NODE_STATE_DRAIN, 1 << 9);
    assert_eq!(PREEMPT_MODE_REQUEUE, 2);
    assert_eq!(
        (
            PREEMPT_DATA_ENABLED,
            PREEMPT_DATA_MODE,
            PREEMPT_DATA_PRIO,
            PREEMPT_DATA_GRACE_TIME
        ),
        (0, 1, 2, 3)
    );
    assert_eq!(ESLURM_INVALID_ACCOUNT, 2045);
    assert_eq!(ESLURM_ACCESS_DENIED, 2002);
    assert_eq!((READ_LOCK, WRITE_LOCK), (1, 2));
}
