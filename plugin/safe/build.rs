//! The Slurm release slurm-sys was built for, as this crate's
//! `cfg(slurm = "22.05")` / `cfg(slurm = "24.11")`: slurm-sys (`links =
//! "slurm"`) hands it over as `DEP_SLURM_RELEASE`. The plugin ABI's
//! differences between releases live behind that cfg here, and only here.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(slurm, values(\"22.05\", \"24.11\"))");
    println!("cargo:rerun-if-env-changed=DEP_SLURM_RELEASE");
    let release = std::env::var("DEP_SLURM_RELEASE").expect("slurm-sys's build script sets DEP_SLURM_RELEASE");
    println!("cargo:rustc-cfg=slurm=\"{release}\"");
}
