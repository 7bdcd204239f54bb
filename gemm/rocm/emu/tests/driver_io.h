// File input and output of the emulator's test drivers (emu_gemm.cpp, emu_quantize.cpp): whole binary
// files of an exact size; any failure ends the driver with status 2.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace driver_io {

inline std::vector<unsigned char> read_file(const std::string &path, size_t expect) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<unsigned char> v((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (v.size() != expect) {
    std::fprintf(stderr, "%s: %zu bytes, expected %zu\n", path.c_str(), v.size(), expect);
    std::exit(2);
  }
  return v;
}

inline void write_file(const std::string &path, const void *data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char *>(data), std::streamsize(bytes));
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(2);
  }
}

}  // namespace driver_io
