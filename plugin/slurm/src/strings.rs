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

/// The most bytes of one log line allot writes: a user's words quoted in
/// a refusal (a 1 MB comment, twenty times over) must not fill the
/// controller's disk, nor hold its job lock while they are written.
pub const LOG_LINE_MAX: usize = 2048;

/// `text` made safe for one log line: control characters (a terminal's
/// escapes among them; NUL, which C cannot carry) written as `\u{..}`
/// escapes, and at most `max` bytes of it kept, with how much was left
/// out said at the end.
pub fn log_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 32);
    let mut rest = text.char_indices();
    for (i, c) in rest.by_ref() {
        let piece_len = if c.is_control() && c != '\t' { c.escape_unicode().len() } else { c.len_utf8() };
        if out.len() + piece_len > max {
            out.push_str(&format!("... [{} more bytes not logged]", text.len() - i));
            return out;
        }
        if c.is_control() && c != '\t' {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::log_line;

    #[test]
    fn a_log_line_is_bounded_and_shows_no_control_character() {
        assert_eq!(log_line("plain text", 100), "plain text");
        let long = "x".repeat(1 << 20);
        let line = log_line(&format!("refused: {long}"), 64);
        assert!(line.len() <= 64 + 40, "{}", line.len());
        assert!(line.ends_with(&format!("... [{} more bytes not logged]", (1 << 20) + 9 - 64)), "{line}");
        assert_eq!(log_line("a\u{1b}[31mred\u{7}\0", 100), "a\\u{1b}[31mred\\u{7}\\u{0}");
        // Never cut inside a character.
        let cut = log_line("ééééé", 5);
        assert!(cut.starts_with("éé..."), "{cut}");
    }
}
