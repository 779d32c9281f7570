//! Compiles `fleetsim.proto` with protox (pure Rust), so no system protoc is needed.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=fleetsim.proto");
    let descriptors = protox::compile(["fleetsim.proto"], ["."])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
