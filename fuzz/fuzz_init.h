// Shared set-up of the fuzz targets.
#pragma once
#include <cstdlib>

// The tensor allocator caches freed blocks for the life of the process; it turns the cache off
// only under GCC's __SANITIZE_ADDRESS__, which clang does not define. Without this, every cached
// block would show up as a leak at exit.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("MIXTRAIN_ALLOCATOR_CACHE_MB", "0", 1);
  return 0;
}
