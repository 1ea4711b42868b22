//! C strings between Slurm and Rust.
//!
//! Strings Slurm gives us are borrowed for the callback's duration. Strings
//! we give Slurm (an error message for the user, a rewritten comment) must
//! come from Slurm's own allocator, because Slurm frees them with `xfree`.

use std::ffi::{CStr, CString};
use std::os::raw::c_char;

use slurm_sys as sys;

/// The text behind a C string owned by Slurm, if any and if UTF-8.
///
/// # Safety
/// `ptr` must be null or a NUL-terminated string that stays valid and
/// unchanged for `'a`.
pub unsafe fn borrowed_str<'a>(ptr: *const c_char) -> Option<&'a str> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller's guarantee.
    unsafe { CStr::from_ptr(ptr) }.to_str().ok()
}

/// The text behind a C string owned by Slurm: `Ok(None)` for null, `Err`
/// with the raw bytes when they are not UTF-8 (for callers that must refuse
/// such input rather than treat it as absent).
///
/// # Safety
/// As for [`borrowed_str`].
pub unsafe fn borrowed_text<'a>(ptr: *const c_char) -> Result<Option<&'a str>, Vec<u8>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null and NUL-terminated per the caller's guarantee.
    let c = unsafe { CStr::from_ptr(ptr) };
    c.to_str().map(Some).map_err(|_| c.to_bytes().to_vec())
}

/// A copy of `text` in memory from Slurm's allocator (interior NULs, which
/// C cannot carry, become spaces).
pub fn slurm_strdup(text: &str) -> *mut c_char {
    let c = CString::new(text.replace('\0', " ")).expect("NULs were replaced");
    // SAFETY: slurm_xstrdup copies a valid NUL-terminated string into xmalloc'd memory (it aborts rather than return NULL on exhaustion).
    unsafe { sys::slurm_xstrdup(c.as_ptr()) }
}

/// Replaces a Slurm-owned string field with `text`, freeing the old one
/// with Slurm's allocator.
///
/// # Safety
/// `*field` must be null or a string from Slurm's allocator that nothing
/// else will use or free afterwards.
pub unsafe fn replace_slurm_string(field: &mut *mut c_char, text: &str) {
    let new = slurm_strdup(text);
    let old = std::mem::replace(field, new);
    if !old.is_null() {
        let mut old = old as *mut std::os::raw::c_void;
        // SAFETY: `old` came from Slurm's allocator and nothing else refers to it now (the caller's guarantee).
        unsafe { sys::slurm_xfree(&mut old) };
    }
}

/// Hands `text` to Slurm through an out-parameter it will free (job_submit's
/// `err_msg`). A null out-parameter is ignored.
///
/// # Safety
/// `out` must be null or point to a writable `char *` slot holding null or
/// a string from Slurm's allocator, as job_submit's `err_msg` does.
pub unsafe fn set_out_string(out: *mut *mut c_char, text: &str) {
    if out.is_null() {
        return;
    }
    // SAFETY: `out` points to a `char *` slot whose current string, if any, is Slurm-allocated and owned by the slot (the caller's guarantee).
    unsafe { replace_slurm_string(&mut *out, text) };
}
