//! Compiles the Prometheus remote-write protos with protox, a pure-Rust protobuf compiler, so
//! that building needs no `protoc`: the 1.0 `prometheus.WriteRequest` (`proto/prometheus/`)
//! and the 2.0 `io.prometheus.write.v2.Request` (`proto/io/prometheus/write/v2/`).

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(
        [
            "prometheus/remote.proto",
            "io/prometheus/write/v2/types.proto",
        ],
        ["proto"],
    )?;
    prost_build::Config::new().compile_fds(files)?;
    Ok(())
}
