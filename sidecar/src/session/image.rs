//! What a CRIU checkpoint would restore, checked before criu is run.
//!
//! criu runs as the session's owner with `CAP_CHECKPOINT_RESTORE` (and, where
//! the bounding set is not full, `CAP_SETPCAP` to drop from it as the image
//! says): the kernel then refuses any uid but the owner's, but a restored
//! process could keep criu's own capabilities if an altered image asked for
//! them. So every thread's credentials in the image (`core-*.img`: a
//! `core_entry` whose `thread_core.creds` is a `creds_entry`, CRIU's
//! images/core.proto and creds.proto) must be the owner's ids and no
//! capability, and every file must be the owner's and writable by nobody
//! else; anything else is refused, naming the file and the field.
use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};
use prost::Message;

use super::store;

/// The part of CRIU's `core_entry` that carries a thread's credentials.
#[derive(Clone, PartialEq, Message)]
pub struct CoreEntry {
    #[prost(message, optional, tag = "5")]
    pub thread_core: Option<ThreadCoreEntry>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ThreadCoreEntry {
    #[prost(message, optional, tag = "10")]
    pub creds: Option<CredsEntry>,
}

/// CRIU's `creds_entry` (the fields that decide what a process may do).
#[derive(Clone, PartialEq, Message)]
pub struct CredsEntry {
    #[prost(uint32, optional, tag = "1")]
    pub uid: Option<u32>,
    #[prost(uint32, optional, tag = "2")]
    pub gid: Option<u32>,
    #[prost(uint32, optional, tag = "3")]
    pub euid: Option<u32>,
    #[prost(uint32, optional, tag = "4")]
    pub egid: Option<u32>,
    #[prost(uint32, optional, tag = "5")]
    pub suid: Option<u32>,
    #[prost(uint32, optional, tag = "6")]
    pub sgid: Option<u32>,
    #[prost(uint32, optional, tag = "7")]
    pub fsuid: Option<u32>,
    #[prost(uint32, optional, tag = "8")]
    pub fsgid: Option<u32>,
    #[prost(uint32, repeated, tag = "9")]
    pub cap_inh: Vec<u32>,
    #[prost(uint32, repeated, tag = "10")]
    pub cap_prm: Vec<u32>,
    #[prost(uint32, repeated, tag = "11")]
    pub cap_eff: Vec<u32>,
    #[prost(uint32, repeated, tag = "14")]
    pub groups: Vec<u32>,
}

/// An image file: two magic numbers, then entries of a little-endian u32
/// length and that many bytes of protobuf. A core image has one entry.
pub fn read_core(bytes: &[u8]) -> Result<CoreEntry> {
    let Some(len) = bytes.get(8..12) else { bail!("shorter than an image's header") };
    let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
    let Some(body) = bytes.get(12..12 + len) else { bail!("its entry is cut short ({len} bytes announced, {} present)", bytes.len().saturating_sub(12)) };
    CoreEntry::decode(body).context("not a CRIU core image")
}

/// Checks a checkpoint's directory before it is restored as `uid`/`gid`.
pub fn check(image: &Path, uid: u32, gid: u32, groups: &[u32]) -> Result<()> {
    store::check_private(image, true)?;
    let mut cores = 0;
    for entry in fs::read_dir(image).with_context(|| format!("cannot read {}", image.display()))? {
        let path = entry?.path();
        store::check_private(&path, false)?;
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !(name.starts_with("core-") && name.ends_with(".img")) {
            continue;
        }
        cores += 1;
        let bytes = fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let core = read_core(&bytes).with_context(|| format!("{}", path.display()))?;
        let Some(creds) = core.thread_core.and_then(|t| t.creds) else { bail!("{}: no credentials in the image", path.display()) };
        check_creds(&creds, uid, gid, groups).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    if cores == 0 {
        bail!("{}: no process in the checkpoint (no core-*.img)", image.display());
    }
    Ok(())
}

fn check_creds(c: &CredsEntry, uid: u32, gid: u32, groups: &[u32]) -> Result<()> {
    for (field, value) in [("uid", c.uid), ("euid", c.euid), ("suid", c.suid), ("fsuid", c.fsuid)] {
        if value != Some(uid) {
            bail!(
                "the process would run with {field} {} but the session is yours (uid {uid}): the image was not made by this session, or was altered",
                show(value)
            );
        }
    }
    for (field, value) in [("gid", c.gid), ("egid", c.egid), ("sgid", c.sgid), ("fsgid", c.fsgid)] {
        if value != Some(gid) && !value.is_some_and(|v| groups.contains(&v)) {
            bail!("the process would run with {field} {} which is not one of your groups: the image was not made by this session, or was altered", show(value));
        }
    }
    if let Some(g) = c.groups.iter().find(|g| **g != gid && !groups.contains(g)) {
        bail!("the process would be in group {g}, which is not one of yours: the image was not made by this session, or was altered");
    }
    for (field, caps) in [("permitted", &c.cap_prm), ("effective", &c.cap_eff), ("inheritable", &c.cap_inh)] {
        if caps.iter().any(|w| *w != 0) {
            bail!("the process would hold {field} capabilities ({caps:x?}): a session's processes hold none; the image was altered");
        }
    }
    Ok(())
}

fn show(v: Option<u32>) -> String {
    v.map_or("(none)".into(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(uid: u32, gid: u32) -> CredsEntry {
        CredsEntry {
            uid: Some(uid),
            gid: Some(gid),
            euid: Some(uid),
            egid: Some(gid),
            suid: Some(uid),
            sgid: Some(gid),
            fsuid: Some(uid),
            fsgid: Some(gid),
            cap_inh: vec![0, 0],
            cap_prm: vec![0, 0],
            cap_eff: vec![0, 0],
            groups: vec![],
        }
    }

    #[test]
    fn the_owners_credentials_pass_and_anything_else_is_named() {
        check_creds(&creds(1001, 1001), 1001, 1001, &[]).unwrap();
        let e = check_creds(&creds(0, 0), 1001, 1001, &[]).unwrap_err().to_string();
        assert!(e.contains("uid 0") && e.contains("uid 1001"), "{e}");
        let mut c = creds(1001, 1001);
        c.suid = Some(0);
        assert!(check_creds(&c, 1001, 1001, &[]).unwrap_err().to_string().contains("suid 0"));
        let mut c = creds(1001, 1001);
        c.cap_prm = vec![1 << 21, 0];
        assert!(check_creds(&c, 1001, 1001, &[]).unwrap_err().to_string().contains("permitted capabilities"));
        let mut c = creds(1001, 27);
        c.groups = vec![27];
        check_creds(&c, 1001, 1001, &[27]).unwrap();
        assert!(check_creds(&c, 1001, 1001, &[]).is_err());
    }

    #[test]
    fn an_image_round_trips_and_a_cut_one_is_refused() {
        let core = CoreEntry { thread_core: Some(ThreadCoreEntry { creds: Some(creds(5, 6)) }) };
        let body = core.encode_to_vec();
        let bytes = [&[0x19, 0x43, 0x56, 0x54, 0x47, 0x38, 0x05, 0x55][..], &(body.len() as u32).to_le_bytes(), &body].concat();
        assert_eq!(read_core(&bytes).unwrap(), core);
        assert!(read_core(&bytes[..bytes.len() - 1]).unwrap_err().to_string().contains("cut short"));
        assert!(read_core(&bytes[..6]).is_err());
    }
}
