//! Compiles the vendored `et_def.proto` with protox (pure Rust) and prost-build: no system
//! protoc, and no tonic (the simulation crate depends on this one and links no async runtime).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=et_def.proto");
    let descriptors = protox::compile(["et_def.proto"], ["."])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
