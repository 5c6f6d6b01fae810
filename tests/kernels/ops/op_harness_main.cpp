// kernel_ops_test's main: one GoogleTest test per op-harness struct (OpHarness.<name>: fast vs
// reference over its configurations), one per struct with a thread filter (OpThreads.<name>:
// 1 vs 2 threads bit for bit), and the registry checks (OpRegistry.*): every library op
// (kernels/op.h) has its reference and an implementation on every backend, and a struct here
// checks it; every struct names library ops. The program links the whole library (CMake: whole
// archive), so every op the library defines is registered, used by a test or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "kernels/op.h"
#include "kernels/ops/op_harness.h"

namespace mixtrain::test {
namespace {

// A test name from a struct name ("activation gelu_erf" -> "activation_gelu_erf").
std::string test_name(std::string s) {
  std::replace_if(
      s.begin(), s.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return s;
}

class OpHarnessTest : public ::testing::Test {
 public:
  explicit OpHarnessTest(const RegisteredOpTest* entry, bool threads) : entry_(entry), threads_(threads) {}
  void TestBody() override {
    if (threads_)
      run_thread_count_check(*entry_);
    else
      run_op_test(*entry_->test);
  }

 private:
  const RegisteredOpTest* entry_;
  bool threads_;
};

// What is missing from the registered ops, one message each: an op registered twice, or without
// its reference, its CPU implementation, its meta form, or a harness entry in `checked`.
std::vector<std::string> registry_gaps(const std::vector<OpInfo>& ops, const std::set<std::string>& checked) {
  std::vector<std::string> gaps;
  std::set<std::string> seen;
  for (const OpInfo& op : ops) {
    if (!seen.insert(op.name).second) gaps.push_back(op.name + ": registered twice");
    if (!op.has_reference) gaps.push_back(op.name + ": no scalar reference");
    if (!op.has_impl[static_cast<int>(BackendId::cpu)]) gaps.push_back(op.name + ": no CPU implementation");
    if (!op.has_impl[static_cast<int>(BackendId::meta)]) gaps.push_back(op.name + ": no meta form");
    if (!checked.count(op.name))
      gaps.push_back(op.name + ": no op-harness entry (tests/kernels/ops/) checks it");
  }
  return gaps;
}

std::set<std::string> harness_ops() {
  std::set<std::string> checked;
  for (const RegisteredOpTest& e : op_registry())
    for (const std::string& op : e.test->ops()) checked.insert(op);
  return checked;
}

TEST(OpRegistry, EveryOpHasItsReferenceItsBackendsAndAHarnessEntry) {
  ASSERT_GE(registered_ops().size(), 30u) << "the library's ops are not all linked in";
  for (const std::string& gap : registry_gaps(registered_ops(), harness_ops())) ADD_FAILURE() << gap;
}

TEST(OpRegistry, EveryHarnessEntryNamesALibraryOp) {
  std::set<std::string> ops;
  for (const OpInfo& op : registered_ops()) ops.insert(op.name);
  for (const RegisteredOpTest& e : op_registry())
    for (const std::string& op : e.test->ops())
      EXPECT_TRUE(ops.count(op)) << e.test->name() << " checks '" << op << "', which no library op is called";
}

// The check finds each kind of gap (so the test above can fail).
TEST(OpRegistry, GapsAreFound) {
  OpInfo full{"full", true, {true, true}}, no_ref{"no_ref", false, {true, true}},
      no_meta{"no_meta", true, {true, false}}, no_entry{"no_entry", true, {true, true}};
  const std::vector<std::string> gaps =
      registry_gaps({full, no_ref, no_meta, no_entry, full}, {"full", "no_ref", "no_meta"});
  EXPECT_EQ(gaps, (std::vector<std::string>{"no_ref: no scalar reference", "no_meta: no meta form",
                                            "no_entry: no op-harness entry (tests/kernels/ops/) checks it",
                                            "full: registered twice"}));
}

// An op without an implementation on a backend throws a typed error naming the op and backend.
TEST(OpRegistry, NoImplementationIsATypedError) {
  try {
    detail::throw_no_impl("some_op", backend_for(Device::meta()));
    FAIL() << "no throw";
  } catch (const ArgumentError& e) {
    EXPECT_STREQ(e.what(), "some_op: no implementation on the meta backend");
  }
}

}  // namespace
}  // namespace mixtrain::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using mixtrain::test::op_registry;
  for (const mixtrain::test::RegisteredOpTest& e : op_registry()) {
    const std::string name = mixtrain::test::test_name(e.test->name());
    ::testing::RegisterTest(
        "OpHarness", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
        [&e]() -> ::testing::Test* { return new mixtrain::test::OpHarnessTest(&e, false); });
    if (e.threads)
      ::testing::RegisterTest(
          "OpThreads", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
          [&e]() -> ::testing::Test* { return new mixtrain::test::OpHarnessTest(&e, true); });
  }
  return RUN_ALL_TESTS();
}
