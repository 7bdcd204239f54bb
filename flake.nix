# For people who build with Nix and Hugging Face's kernel-builder (`nix run .#build-and-copy`): it reads
# the same build.toml as scripts/build.py. The project's own pipeline (make build, make docker-build,
# the workflows) does not need Nix. Through Nix only the CPU and ROCm backends are expected to build: the
# cuda backend needs CUTLASS 4.2's headers, which scripts/build.py takes from the nvidia-cutlass wheel and
# kernel-builder's dependency list does not offer (it has cutlass_4_0 and 4_4 and up; see build.toml).
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
