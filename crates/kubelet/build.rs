//! Generates the device plugin (`deviceplugin/v1beta1`) and pod-resources (`podresources/v1`)
//! gRPC code from upstream's .proto files in proto/. tonic-prost-build and protoc are what
//! k8s-cri already builds its CRI code with, so this adds no new build dependency. The one crate
//! with these bindings (k8s-deviceplugin 0.2) is on tonic 0.7 / prost 0.10 and has no
//! pod-resources API: it would build a second gRPC stack.
fn main() {
    println!("cargo:rerun-if-changed=proto");
    let protos = [
        "proto/deviceplugin/v1beta1/api.proto",
        "proto/podresources/v1/api.proto",
    ];
    if let Err(e) = tonic_prost_build::configure().compile_protos(&protos, &["proto"]) {
        panic!("generating gRPC code from {protos:?}: {e}");
    }
}
