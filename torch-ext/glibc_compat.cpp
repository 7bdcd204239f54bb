// Keeps the extension within manylinux_2_28, the Hub's symbol limit, when built on a newer glibc.
//
// libstdc++'s headers (GCC >= 11) read glibc's `__libc_single_threaded` (GLIBC_2.32) to skip atomic
// reference counting in single-threaded processes. This library carries its own hidden copy instead,
// fixed at 0 ("may be multi-threaded"): reference counts stay atomic, which is always correct, and the
// .so no longer imports the symbol. kernel-abi-check (scripts/check.py) verifies the result.
extern "C" __attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
