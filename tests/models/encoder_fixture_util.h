// Shared by the encoder fixture tests (tools/make_encoder_fixture.py -> tests/fixtures/encoder/):
// the fixture's batch, the classifier options it was made with, and the comparison helpers.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fixtures/fixture.h"
#include "mixtrain/data/data_source.h"
#include "mixtrain/models/encoder.h"

namespace mixtrain::test {

inline const std::string kEncoderFixtures = MIXTRAIN_SOURCE_DIR "/tests/fixtures/encoder/";

// input_ids, token_type_ids, attention_mask (B, T) and targets (B), as the fixture stores them.
inline Batch encoder_fixture_batch(const Fixture& fx) {
  const auto& s = fx.at("input_ids").shape;
  Batch b;
  b.inputs = Tensor::from_ints(fx.i32("input_ids"), {s[0], s[1]});
  b.token_types = Tensor::from_ints(fx.i32("token_type_ids"), {s[0], s[1]});
  b.attention_mask = Tensor::from_ints(fx.i32("attention_mask"), {s[0], s[1]});
  b.targets = Tensor::from_ints(fx.i32("targets"), {s[0]});
  b.rows = s[0];
  for (int32_t m : fx.i32("attention_mask")) b.real_tokens += m;
  return b;
}

inline ClassifierOptions encoder_fixture_options(const Fixture& fx, Pooling pooling = Pooling::cls) {
  ClassifierOptions o;
  o.labels = fx.header.at("config").at("labels").get<std::vector<std::string>>();
  o.pooling = pooling;
  o.dropout = 0.f;  // the fixtures run without dropout
  return o;
}

inline double max_abs(const std::vector<float>& v) {
  double mx = 0;
  for (float r : v) mx = std::max(mx, static_cast<double>(std::fabs(r)));
  return mx;
}

// max_i |got_i - ref_i| / max_i |ref_i| (INFINITY on a size mismatch or NaN).
inline double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  const double mx = max_abs(ref);
  return worst / (mx > 0 ? mx : 1.0);
}

// |got - ref| <= abs_of_max * max|ref| + rel * |ref| element by element; the message names the
// worst element and the share of its budget used.
inline ::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& ref,
                                        double abs_of_max, double rel, const std::string& what) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << ref.size();
  const double mx = max_abs(ref);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double budget = abs_of_max * mx + rel * std::fabs(ref[i]);
    const double ratio = std::fabs(static_cast<double>(got[i]) - ref[i]) / (budget > 0 ? budget : 1e-30);
    if (!(ratio <= worst)) {
      worst = ratio;
      at = i;
    }
  }
  if (worst > 1.0 || std::isnan(worst))
    return ::testing::AssertionFailure() << what << ": element " << at << " got " << got[at] << " ref "
                                         << ref[at] << " uses " << 100 * worst << "% of its budget";
  return ::testing::AssertionSuccess();
}

}  // namespace mixtrain::test
