//! Compiles the Prometheus remote-write protos (`proto/prometheus/`) with protox, a pure-Rust
//! protobuf compiler, so that building needs no `protoc`.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(["prometheus/remote.proto"], ["proto"])?;
    prost_build::Config::new().compile_fds(files)?;
    Ok(())
}
