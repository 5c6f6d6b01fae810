// The MPI world's entry points for dist/world.cpp: defined by mpi_communicator.cpp when CMake
// finds MPI, by no_mpi.cpp otherwise.
#pragma once
#include <memory>

#include "mixtrain/dist/communicator.h"

namespace mixtrain::dist {

// MPI_Init and the world communicator; null in a build without MPI.
std::unique_ptr<Communicator> make_mpi_world();
// MPI_Abort of the whole job with `code` (the launcher ends every rank).
[[noreturn]] void abort_mpi_world(int code);

}  // namespace mixtrain::dist
