"""Does a C++ exception thrown from a torch extension built on this machine crash the process?

Not collected by pytest. Builds two tiny torch ops with torch.utils.cpp_extension.load_inline: one
plain (default flags), one with -fvisibility=hidden (as scripts/build.py compiles), then calls each
with an argument that makes TORCH_CHECK throw, each in its own process. Prints the toolchain too.
"""

from __future__ import annotations

import subprocess
import sys

SRC = r"""
#include <torch/extension.h>
void boom(at::Tensor t, int64_t n) {
  TORCH_CHECK(t.size(0) == n, "t must have shape (", n, "), got ", t.sizes());
}
TORCH_LIBRARY(NAME, m) { m.def("boom(Tensor t, int n) -> ()"); m.impl("boom", &boom); }
"""


def child(hidden: bool) -> None:
    import torch
    from torch.utils.cpp_extension import load_inline

    name = "throwprobe_hidden" if hidden else "throwprobe_plain"
    flags = ["-O2", "-fvisibility=hidden", "-fno-gnu-unique"] if hidden else ["-O2"]
    load_inline(name, cpp_sources=SRC.replace("NAME", name), extra_cflags=flags, is_python_module=False)
    try:
        getattr(torch.ops, name).boom(torch.zeros(3), 5)
    except RuntimeError as e:
        print(f"{name}: raised RuntimeError: {str(e).splitlines()[0]}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1] == "hidden")
        sys.exit(0)
    for cmd in (["c++", "--version"], ["g++", "--version"], ["which", "c++", "g++"]):
        p = subprocess.run(cmd, capture_output=True, text=True)
        print(" ".join(cmd), "->", (p.stdout or p.stderr).splitlines()[:2], flush=True)
    for mode in ("plain", "hidden"):
        p = subprocess.run([sys.executable, "-X", "faulthandler", __file__, mode], capture_output=True, text=True)
        out = (p.stdout + p.stderr).strip().splitlines()
        print(f"{mode}: rc={p.returncode} {' | '.join(out[-2:])[:300]}", flush=True)
