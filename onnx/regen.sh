#!/bin/sh
# Regenerates src/proto.rs from proto/onnx/*.proto; needs protoc (Debian: protobuf-compiler).
cd "$(dirname "$0")" && cargo run --quiet --manifest-path gen/Cargo.toml --target-dir ../target/onnx-gen
