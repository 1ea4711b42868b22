//! The plugin ABI steps the Slurm of slurm-sys is at or past, as this
//! crate's `cfg(slurm_ge_25_05)` and so on ("this release or later"):
//! slurm-sys (`links = "slurm"`) hands them over as `DEP_SLURM_ABI_CFGS`, and
//! every step it knows as `DEP_SLURM_ABI_KNOWN`, so the list lives in
//! slurm-sys/build.rs alone. The plugin ABI's differences between releases
//! live behind these cfgs here, and only here.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_SLURM_ABI_CFGS");
    println!("cargo:rerun-if-env-changed=DEP_SLURM_ABI_KNOWN");
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("slurm-sys's build script sets {name}"));
    let known = var("DEP_SLURM_ABI_KNOWN");
    println!("cargo::rustc-check-cfg=cfg({})", known.split(',').collect::<Vec<_>>().join(", "));
    for cfg in var("DEP_SLURM_ABI_CFGS").split(',').filter(|c| !c.is_empty()) {
        println!("cargo:rustc-cfg={cfg}");
    }
}
