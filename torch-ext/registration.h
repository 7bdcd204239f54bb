// Registration helpers: the build passes -DTORCH_EXTENSION_NAME=<ops_name> (unique per build), so the ops
// land in their own namespace torch.ops.<ops_name> and two builds can live in one process.
#pragma once

#include <Python.h>

#define _GEMM_CONCAT(a, b) a##b
#define GEMM_CONCAT(a, b) _GEMM_CONCAT(a, b)
#define _GEMM_STRINGIFY(a) #a
#define GEMM_STRINGIFY(a) _GEMM_STRINGIFY(a)

// TORCH_LIBRARY needs a literal namespace token; expand the macro argument first.
#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)
#define TORCH_LIBRARY_IMPL_EXPAND(NAME, KEY, MODULE) TORCH_LIBRARY_IMPL(NAME, KEY, MODULE)

// An empty limited-API extension module, so `from . import <ops_name>` loads the .so (and with it the
// static registrations above). No pybind11: it is not limited-API.
#define REGISTER_EXTENSION(NAME)                                                          \
  PyMODINIT_FUNC GEMM_CONCAT(PyInit_, NAME)() {                                           \
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, GEMM_STRINGIFY(NAME),      \
                                        nullptr, 0, nullptr};                            \
    return PyModule_Create(&module);                                                     \
  }
