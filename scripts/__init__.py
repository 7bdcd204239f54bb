"""The gemm pipeline: one module per stage (build.toml and docker/matrix.yaml -> build -> check -> test -> publish)."""
