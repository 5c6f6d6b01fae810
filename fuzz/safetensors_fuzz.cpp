// libFuzzer target: the safetensors reader. Any input must parse or throw mixtrain::Error; every
// tensor of a parsed file must convert (or throw DTypeError). Anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "checkpoint/safetensors.h"
#include "fuzz_init.h"
#include "mixtrain/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const mixtrain::SafetensorsFile f =
        mixtrain::SafetensorsFile::parse(std::vector<uint8_t>(data, data + size), "fuzz");
    for (const auto& e : f.entries()) {
      try {
        if (e.numel <= (1 << 20)) (void)f.tensor(e);
      } catch (const mixtrain::DTypeError&) {
      }
    }
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
