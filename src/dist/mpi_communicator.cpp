// The MPI world (dist/communicator.h): MPI_COMM_WORLD with OpenMPI's collectives. Sums use
// user-defined operations declared non-commutative, so MPI applies them in rank order and the
// result is the same run to run (and the same on every rank); 16-bit data travels as 16-bit
// words and is summed in fp32 (dist/reduce_sum.h). Errors abort the job (MPI_ERRORS_ARE_FATAL,
// MPI's default): a rank never waits forever on one that is gone, the launcher ends them all.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist/mpi_world.h"
#include "dist/reduce_sum.h"
#include "mixtrain/core/error.h"

namespace mixtrain::dist {
namespace {

template <DType D>
void sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  sum_into(in, inout, *len, D);
}

void sum_f64_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const double* a = static_cast<const double*>(in);
  double* b = static_cast<double*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = a[i] + b[i];
}

class MpiWorld final : public Communicator {
 public:
  MpiWorld() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) MPI_Init(nullptr, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Op_create(&sum_op<DType::f32>, /*commute=*/0, &sum_f32_);
    MPI_Op_create(&sum_op<DType::bf16>, 0, &sum_bf16_);
    MPI_Op_create(&sum_op<DType::f16>, 0, &sum_f16_);
    MPI_Op_create(&sum_f64_op, 0, &sum_f64_);
  }
  ~MpiWorld() override {
    wait_all();
    MPI_Op_free(&sum_f32_);
    MPI_Op_free(&sum_bf16_);
    MPI_Op_free(&sum_f16_);
    MPI_Op_free(&sum_f64_);
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "MPI"; }

  void broadcast(void* data, size_t bytes, int root) override {
    char* p = static_cast<char*>(data);
    constexpr size_t kChunk = size_t{1} << 30;  // MPI counts are int
    for (size_t done = 0; done < bytes; done += kChunk) {
      const size_t n = std::min(kChunk, bytes - done);
      MPI_Bcast(p + done, static_cast<int>(n), MPI_BYTE, root, MPI_COMM_WORLD);
    }
  }

  void sum(std::span<double> v) override {
    MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, sum_f64_, MPI_COMM_WORLD);
  }

  int64_t max(int64_t value) override {
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    return value;
  }

  void start_sum(void* data, int64_t n, DType dtype) override {
    MPI_Datatype type = MPI_FLOAT;
    MPI_Op op = sum_f32_;
    if (dtype == DType::bf16 || dtype == DType::f16) {
      type = MPI_UINT16_T;
      op = dtype == DType::bf16 ? sum_bf16_ : sum_f16_;
    } else if (dtype != DType::f32) {
      throw ArgumentError("MPI start_sum: cannot reduce " + std::string(dtype_name(dtype)));
    }
    const size_t elem = dtype_size(dtype);
    constexpr int64_t kChunk = int64_t{1} << 30;  // MPI counts are int
    for (int64_t done = 0; done < n; done += kChunk) {
      const int64_t m = std::min(kChunk, n - done);
      MPI_Request req;
      MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(data) + done * elem, static_cast<int>(m), type, op,
                     MPI_COMM_WORLD, &req);
      requests_.push_back(req);
    }
  }

  void progress() override {
    if (requests_.empty()) return;
    int flag = 0;
    MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, MPI_STATUSES_IGNORE);
  }

  void wait_all() override {
    if (requests_.empty()) return;
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    requests_.clear();
  }

 private:
  int rank_ = 0;
  int size_ = 1;
  MPI_Op sum_f32_{}, sum_bf16_{}, sum_f16_{}, sum_f64_{};
  std::vector<MPI_Request> requests_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world() { return std::make_unique<MpiWorld>(); }

void abort_mpi_world(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace mixtrain::dist
