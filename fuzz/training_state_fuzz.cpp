// libFuzzer target: the training-state reader (train_state.safetensors), safetensors included.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "checkpoint/training_state.h"
#include "fuzz_init.h"
#include "mixtrain/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)mixtrain::decode_training_state(std::vector<uint8_t>(data, data + size), "fuzz");
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
