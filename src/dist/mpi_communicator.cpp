// The MPI world (dist/communicator.h): MPI_COMM_WORLD with OpenMPI's collectives. Sums use
// user-defined operations declared non-commutative, so MPI applies them in rank order and the
// result is the same run to run (and the same on every rank); 16-bit data travels as 16-bit
// words and is summed in fp32 (dist/reduce_sum.h). Errors abort the job (MPI_ERRORS_ARE_FATAL,
// MPI's default): a rank never waits forever on one that is gone, the launcher ends them all.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
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
    const MPI_Op op = op_for(dtype, type, "start_sum");
    const size_t elem = dtype_size(dtype);
    constexpr int64_t kChunk = int64_t{1} << 30;  // MPI counts are int
    Op& o = ops_.emplace_back();
    for (int64_t done = 0; done < n; done += kChunk) {
      const int64_t m = std::min(kChunk, n - done);
      MPI_Request req;
      MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(data) + done * elem, static_cast<int>(m), type, op,
                     MPI_COMM_WORLD, &req);
      o.requests.push_back(req);
    }
  }

  void start_reduce_scatter(void* data, std::span<const int64_t> counts, DType dtype) override {
    if (counts.size() != static_cast<size_t>(size_))
      throw ArgumentError("MPI start_reduce_scatter: " + std::to_string(counts.size()) + " counts for " +
                          std::to_string(size_) + " ranks");
    MPI_Datatype type = MPI_FLOAT;
    const MPI_Op op = op_for(dtype, type, "start_reduce_scatter");
    // MPI_IN_PLACE: the input is the whole buffer and this rank's sum lands at its start; it is
    // moved to the piece's own offset once complete (wait_all).
    std::vector<int> c(counts.size());
    int64_t offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      c[r] = as_int(counts[r], "start_reduce_scatter");
      if (static_cast<int>(r) < rank_) offset += counts[r];
    }
    Op& o = ops_.emplace_back();
    o.counts = std::move(c);
    MPI_Request req;
    MPI_Ireduce_scatter(MPI_IN_PLACE, data, o.counts.data(), type, op, MPI_COMM_WORLD, &req);
    o.requests.push_back(req);
    const size_t elem = dtype_size(dtype);
    if (offset > 0 && counts[static_cast<size_t>(rank_)] > 0)
      o.move = {static_cast<char*>(data) + static_cast<size_t>(offset) * elem, static_cast<char*>(data),
                static_cast<size_t>(counts[static_cast<size_t>(rank_)]) * elem};
  }

  void start_all_to_all(const void* send, std::span<const int64_t> send_bytes, void* recv,
                        std::span<const int64_t> recv_bytes) override {
    Op& o = ops_.emplace_back();
    layout(send_bytes, o.counts, o.displs, "all_to_all");
    layout(recv_bytes, o.recv_counts, o.recv_displs, "all_to_all");
    MPI_Request req;
    MPI_Ialltoallv(send, o.counts.data(), o.displs.data(), MPI_BYTE, recv, o.recv_counts.data(),
                   o.recv_displs.data(), MPI_BYTE, MPI_COMM_WORLD, &req);
    o.requests.push_back(req);
  }

  void all_gather(void* data, std::span<const int64_t> bytes) override {
    std::vector<int> counts, displs;
    layout(bytes, counts, displs, "all_gather");
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, data, counts.data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD);
  }

  void gather(const void* piece, void* all, std::span<const int64_t> bytes, int root) override {
    std::vector<int> counts, displs;
    layout(bytes, counts, displs, "gather");
    MPI_Gatherv(piece, counts[static_cast<size_t>(rank_)], MPI_BYTE, all, counts.data(), displs.data(),
                MPI_BYTE, root, MPI_COMM_WORLD);
  }

  void progress() override {
    // Testing the oldest operation's requests lets the library advance the others too.
    if (ops_.empty() || ops_.front().requests.empty()) return;
    int flag = 0;
    std::vector<MPI_Request>& r = ops_.front().requests;
    MPI_Testall(static_cast<int>(r.size()), r.data(), &flag, MPI_STATUSES_IGNORE);
  }

  void wait_all() override { wait_oldest(ops_.size()); }

  void wait_oldest(size_t n) override {
    for (; n > 0 && !ops_.empty(); --n) {
      Op& o = ops_.front();
      MPI_Waitall(static_cast<int>(o.requests.size()), o.requests.data(), MPI_STATUSES_IGNORE);
      if (o.move.bytes > 0) std::memmove(o.move.to, o.move.from, o.move.bytes);
      ops_.pop_front();
    }
  }

 private:
  // The element type and the rank-order sum for data of `dtype` (f32, bf16, f16).
  MPI_Op op_for(DType dtype, MPI_Datatype& type, const char* what) const {
    if (dtype == DType::f32) {
      type = MPI_FLOAT;
      return sum_f32_;
    }
    if (dtype == DType::bf16 || dtype == DType::f16) {
      type = MPI_UINT16_T;
      return dtype == DType::bf16 ? sum_bf16_ : sum_f16_;
    }
    throw ArgumentError("MPI " + std::string(what) + ": cannot reduce " + std::string(dtype_name(dtype)));
  }
  // MPI counts are int: a piece past 2^31 - 1 elements or bytes is refused, not truncated.
  static int as_int(int64_t n, const char* what) {
    if (n < 0 || n > std::numeric_limits<int>::max())
      throw ArgumentError("MPI " + std::string(what) + ": a piece of " + std::to_string(n) +
                          " exceeds MPI's int count (2^31 - 1)");
    return static_cast<int>(n);
  }
  void layout(std::span<const int64_t> bytes, std::vector<int>& counts, std::vector<int>& displs,
              const char* what) const {
    if (bytes.size() != static_cast<size_t>(size_))
      throw ArgumentError("MPI " + std::string(what) + ": " + std::to_string(bytes.size()) + " pieces for " +
                          std::to_string(size_) + " ranks");
    int64_t at = 0;
    for (int64_t b : bytes) {
      counts.push_back(as_int(b, what));
      displs.push_back(as_int(at, what));
      at += b;
    }
  }

  struct Move {  // a finished reduce-scatter's result, from the bucket's start to its piece
    char* to = nullptr;
    const char* from = nullptr;
    size_t bytes = 0;
  };
  struct Op {  // one started sum (its chunks) or reduce-scatter
    std::vector<MPI_Request> requests;
    std::vector<int> counts;  // a reduce-scatter's recvcounts (an all-to-all's send counts), alive until done
    std::vector<int> displs, recv_counts, recv_displs;  // an all-to-all's
    Move move;
  };
  int rank_ = 0;
  int size_ = 1;
  MPI_Op sum_f32_{}, sum_bf16_{}, sum_f16_{}, sum_f64_{};
  std::deque<Op> ops_;  // started, oldest first
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
