# For people who build with Nix and Hugging Face's kernel-builder (`nix run .#build-and-copy`): it reads
# the same build.toml as scripts/build.py. The project's own pipeline (make build, make docker-build,
# the workflows) does not need Nix.
{
  description = "gemm: FP8 block-scaled GEMM for MI300X (ROCm), Hopper (CUDA) and CPU";

  inputs = {
    kernel-builder.url = "github:huggingface/kernels";
  };

  outputs =
    { self, kernel-builder }:
    kernel-builder.lib.genKernelFlakeOutputs {
      inherit self;
      path = ./.;
    };
}
