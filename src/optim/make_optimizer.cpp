// make_optimizer (optim/optimizer.h): the optimizer an OptimizerConfig names. Apart from
// optimizer.cpp so that AdamW and SGD include the interface and nothing includes them back.
#include <memory>

#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/optim/sgd.h"

namespace mixtrain {

std::unique_ptr<Optimizer> make_optimizer(const ParameterStore& store, const OptimizerConfig& c,
                                          FlatRange shard) {
  if (c.kind == OptimizerKind::adamw) {
    AdamWConfig a;
    a.lr = c.lr;
    a.beta1 = c.beta1;
    a.beta2 = c.beta2;
    a.eps = c.eps;
    a.weight_decay = c.weight_decay;
    a.rounding = c.rounding;
    a.seed = c.seed;
    a.state = c.state;
    return std::make_unique<AdamW>(store, a, shard);
  }
  SgdConfig s;
  s.lr = c.lr;
  s.momentum = c.momentum;
  s.dampening = c.dampening;
  s.nesterov = c.nesterov;
  s.weight_decay = c.weight_decay;
  s.rounding = c.rounding;
  s.seed = c.seed;
  s.state = c.state;
  return std::make_unique<SGD>(store, s, shard);
}

}  // namespace mixtrain
