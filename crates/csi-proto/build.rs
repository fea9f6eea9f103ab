//! Generates `csi.v1` and `pluginregistration` (client and server) from the repository's proto/.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let csi = dir.join("csi.proto");
    let reg = dir.join("pluginregistration.proto");
    println!("cargo:rerun-if-changed={}", csi.display());
    println!("cargo:rerun-if-changed={}", reg.display());
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&[csi, reg], &[dir])?;
    Ok(())
}
