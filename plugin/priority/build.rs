//! Builds the `long double` shim (see shim/calc_fs_factor.c) into the plugin
//! and exports its symbol, which Slurm requires of every priority plugin.
fn main() {
    cc::Build::new().file("shim/calc_fs_factor.c").warnings(true).compile("allot_priority_shim");
    let map = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("shim/exports.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", map.display());
    println!("cargo:rerun-if-changed=shim/calc_fs_factor.c");
    println!("cargo:rerun-if-changed=shim/exports.map");
}
