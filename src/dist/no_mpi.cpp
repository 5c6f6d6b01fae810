// A build without MPI (CMake found none): no MPI world. Replaced by mpi_communicator.cpp when MPI
// is found (CMakeLists.txt compiles exactly one of the two).
#include <cstdlib>

#include "dist/mpi_world.h"

namespace mixtrain::dist {

std::unique_ptr<Communicator> make_mpi_world() { return nullptr; }
void abort_mpi_world(int code) { std::_Exit(code); }

}  // namespace mixtrain::dist
