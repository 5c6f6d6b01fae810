// The ranks of a data-parallel run and the collectives they need, behind one small interface so
// the library builds and tests without MPI: SingleProcess is the world of a plain process; the
// MPI world (src/dist/mpi_communicator.cpp, built when CMake finds MPI) is used when the program
// was started by mpirun. Every collective must be called by every rank in the same order.
//
//   Communicator& w = world();   // MPI's when launched by `mpirun -np N`, else one rank
//   w.broadcast(params, bytes, /*root=*/0);
//   int id = w.start_sum(grads, n, DType::f32);  // non-blocking, in place
//   ... w.progress(); ... w.wait_all();
//
// Sums of floating-point data run in a fixed order by rank ((r0 + r1) + r2 ...), so a run's
// result does not depend on message timing (MPI applies a non-commutative operation in rank
// order; the floating-point add is declared non-commutative for that reason).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "mixtrain/tensor/dtype.h"

namespace mixtrain {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;  // "single process" or "MPI"

  // Copies `bytes` bytes at data from rank `root` to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // In-place sum over ranks of doubles, in rank order.
  virtual void sum(std::span<double> values) = 0;
  // The largest value over ranks.
  virtual int64_t max(int64_t value) = 0;
  // Whether `flag` is set on any rank.
  bool any(bool flag) { return max(flag ? 1 : 0) != 0; }
  // Starts an in-place sum over ranks of n elements at data, stored as dtype (f32, bf16 or f16;
  // the 16-bit formats are summed in fp32 and rounded back, pairwise in rank order). The data
  // must not be touched until wait_all().
  virtual void start_sum(void* data, int64_t n, DType dtype) = 0;
  // Starts an in-place reduce-scatter (ZeRO's gradient sum, optim/zero.h) of the counts[0] + ...
  // + counts[N-1] elements at data, stored as dtype (as start_sum): afterwards rank r's piece,
  // the counts[r] elements at offset counts[0] + ... + counts[r-1], holds the sum over ranks of
  // that piece, with start_sum's operation (rank order, the same rounding; MPI may group the
  // additions of more than 2 ranks differently than in its all-reduce); the other pieces are
  // left undefined. counts has one entry per rank. Completed by wait_all().
  virtual void start_reduce_scatter(void* data, std::span<const int64_t> counts, DType dtype) = 0;
  // Starts an all-to-all of bytes (MPI_Ialltoallv): this rank's send_bytes[k] bytes at offset
  // send_bytes[0] + ... + send_bytes[k-1] of `send` go to rank k, which receives them at offset
  // recv_bytes[0] + ... + recv_bytes[r-1] of its `recv` (r: this rank). Neither buffer may be
  // touched until the operation is completed (wait_all / wait_oldest). A compressed
  // reduce-scatter's transport (train/data_parallel.h: int8 pieces).
  virtual void start_all_to_all(const void* send, std::span<const int64_t> send_bytes, void* recv,
                                std::span<const int64_t> recv_bytes) = 0;
  // Lets started sums advance (MPI moves non-blocking collectives only inside MPI calls).
  virtual void progress() = 0;
  // Completes every started sum and reduce-scatter.
  virtual void wait_all() = 0;
  // Completes the n oldest of the started sums and reduce-scatters not yet completed (all of them
  // when fewer are outstanding), so their buffers may be reused while later ones run.
  virtual void wait_oldest(size_t n) = 0;
  // In place: rank r's bytes[r] bytes at offset bytes[0] + ... + bytes[r-1] of data go to every
  // rank (MPI_Allgatherv). bytes has one entry per rank.
  virtual void all_gather(void* data, std::span<const int64_t> bytes) = 0;
  // Rank r's bytes[r] bytes at `piece` go to rank `root`, which receives every rank's, in rank
  // order, at `all` (read on root only; may be null elsewhere) (MPI_Gatherv).
  virtual void gather(const void* piece, void* all, std::span<const int64_t> bytes, int root) = 0;
};

// The world of a process started without mpirun: one rank; every collective is the identity.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "single process"; }
  void broadcast(void*, size_t, int) override {}
  void sum(std::span<double>) override {}
  int64_t max(int64_t value) override { return value; }
  void start_sum(void*, int64_t, DType) override {}
  void start_reduce_scatter(void*, std::span<const int64_t>, DType) override {}
  void start_all_to_all(const void* send, std::span<const int64_t> send_bytes, void* recv,
                        std::span<const int64_t> recv_bytes) override;
  void progress() override {}
  void wait_all() override {}
  void wait_oldest(size_t) override {}
  void all_gather(void*, std::span<const int64_t>) override {}
  void gather(const void* piece, void* all, std::span<const int64_t> bytes, int) override;
};

// The world of a memory prediction (train/memory_prediction.h): `size` ranks seen from rank
// `rank`, for a run on the meta device, where tensors hold no data. Every collective moves
// nothing: sums and maxima return this rank's values, so what the run allocates is this rank's.
class MetaWorld final : public Communicator {
 public:
  MetaWorld(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "meta"; }
  void broadcast(void*, size_t, int) override {}
  void sum(std::span<double>) override {}
  int64_t max(int64_t value) override { return value; }
  void start_sum(void*, int64_t, DType) override {}
  void start_reduce_scatter(void*, std::span<const int64_t>, DType) override {}
  void start_all_to_all(const void*, std::span<const int64_t>, void*, std::span<const int64_t>) override {}
  void progress() override {}
  void wait_all() override {}
  void wait_oldest(size_t) override {}
  void all_gather(void*, std::span<const int64_t>) override {}
  void gather(const void*, void*, std::span<const int64_t>, int) override {}

 private:
  int rank_, size_;
};

// This process's world, made on first use: MPI's when the process was started by mpirun (its
// environment says so), one rank otherwise. Throws Error when started by mpirun in a build
// without MPI.
Communicator& world();
// Whether the environment says an MPI launcher started the process (OMPI_COMM_WORLD_SIZE,
// PMIX_RANK or PMI_SIZE is set).
bool launched_by_mpi();
// Ends the world before the process exits with `exit_code`: an orderly MPI_Finalize for 0 and
// for codes every rank agrees on (3: diverged, 128+signal: interrupted), MPI_Abort for an error
// (any other code), so a rank that failed alone ends the job instead of leaving the others
// waiting in a collective. Returns exit_code; a no-op without MPI.
int finish_world(int exit_code);

}  // namespace mixtrain
