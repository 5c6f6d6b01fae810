// This process's world (dist/communicator.h): MPI's under mpirun, one rank otherwise.
#include <cstdlib>
#include <cstring>
#include <memory>

#include "dist/mpi_world.h"
#include "mixtrain/core/error.h"
#include "mixtrain/dist/communicator.h"

namespace mixtrain {
namespace {
std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> w;
  return w;
}
}  // namespace

void SingleProcess::start_all_to_all(const void* send, std::span<const int64_t> send_bytes, void* recv,
                                     std::span<const int64_t> recv_bytes) {
  if (send_bytes.size() != 1 || recv_bytes.size() != 1 || send_bytes[0] != recv_bytes[0])
    throw ArgumentError("SingleProcess::start_all_to_all: one rank sends itself what it receives");
  if (send_bytes[0] > 0 && send != recv) std::memmove(recv, send, static_cast<size_t>(send_bytes[0]));
}

void SingleProcess::gather(const void* piece, void* all, std::span<const int64_t> bytes, int) {
  if (all != piece && !bytes.empty() && bytes[0] > 0) std::memmove(all, piece, static_cast<size_t>(bytes[0]));
}

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}

Communicator& world() {
  std::unique_ptr<Communicator>& w = world_slot();
  if (!w) {
    if (launched_by_mpi()) {
      w = dist::make_mpi_world();
      if (!w)
        throw Error(
            "started by mpirun, but this mixtrain was built without MPI (install libopenmpi-dev and "
            "rebuild)");
    } else {
      w = std::make_unique<SingleProcess>();
    }
  }
  return *w;
}

int finish_world(int exit_code) {
  std::unique_ptr<Communicator>& w = world_slot();
  if (!w) return exit_code;
  const bool agreed = exit_code == 0 || exit_code == 3 || exit_code >= 128;
  if (!agreed && w->size() > 1) dist::abort_mpi_world(exit_code);  // does not return
  w.reset();                                                       // MPI_Finalize
  return exit_code;
}

}  // namespace mixtrain
