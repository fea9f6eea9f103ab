//! Generates the client of containerd's events service and the event payloads PLEG decodes
//! (`containerd.services.events.v1`, `containerd.events`) from the repository's proto/containerd.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto/containerd");
    let files: Vec<_> = [
        "events.proto",
        "task.proto",
        "container.proto",
        "mount.proto",
    ]
    .iter()
    .map(|f| dir.join(f))
    .collect();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_protos(&files, &[dir])?;
    Ok(())
}
