// Helpers for the Pipe-BD tests.
#include "tests/bd/distill_testing.h"

#include <gtest/gtest.h>

#include <set>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/split.h"
#include "models/losses.h"
#include "parallel/communicator.h"
#include "parallel/worker.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace bd {
namespace testing {

WorkloadSpec nas_workload(uint64_t seed) {
  WorkloadSpec s;
  s.teacher = "mobilenet_v2:cifar,width_mult=0.25,classes=10,seed=" + std::to_string(seed % 1000);
  s.student = "supernet";
  s.supernet_cells = 1;
  s.student_seed = seed % 997;
  s.sample = {3, 16, 16};
  return s;
}

WorkloadSpec compression_workload(uint64_t seed) {
  WorkloadSpec s;
  s.teacher = "resnet18:cifar,width=4,classes=10,seed=" + std::to_string(seed % 1000);
  s.student = "separable";
  s.student_seed = seed % 997;
  s.sample = {3, 16, 16};
  return s;
}

RunContext make_context(const Workload& w, uint64_t seed, int64_t samples, int64_t batch, int64_t epochs) {
  RunContext ctx;
  ctx.workload = &w;
  ctx.dataset = data::open_dataset(
      "synthetic:n=" + std::to_string(samples) + ",classes=10,h=16,w=16,c=3,seed=" + std::to_string(seed % 10007),
      true);
  ctx.train.batch = batch;
  ctx.train.epochs = epochs;
  ctx.train.optimizer.lr = 0.05;
  ctx.train.optimizer.weight_decay = 1e-4;
  ctx.train.data_seed = seed;
  ctx.train.loader_threads = 0;
  return ctx;
}

namespace {

struct Copy {
  models::ModulePtr module;
  NamedTensors params;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LrScheduler> sched;
};

std::unique_ptr<data::Loader> make_loader(const RunContext& ctx, int64_t batch, int64_t shard, int64_t shards) {
  data::LoaderOptions o;
  o.batch_size = batch;
  o.seed = ctx.train.data_seed;
  o.num_workers = 0;
  o.shard_rank = shard;
  o.num_shards = shards;
  return std::make_unique<data::Loader>(ctx.dataset, data::Pipeline::parse(ctx.train.augment), o);
}

// Data parallelism as the paper states it: the g replicas of a block compute the mean loss over their own rows,
// and every replica steps with the gradient of the step's mean loss over all its rows, sum_q (n_q / n) grad_q
// with n = sum_q n_q. Formed here in double and rounded once (the runner sums in float32 over the group and
// scales after: a different rounding, so the replicated runs match this only within a tolerance).
void batch_mean_gradient(std::vector<Copy>& copies, const std::vector<int64_t>& rows) {
  double n = 0;
  for (int64_t r : rows) n += static_cast<double>(r);
  for (size_t i = 0; i < copies[0].params.size(); ++i) {
    Tensor g0 = copies[0].params[i].second.grad();
    if (!g0.defined()) continue;  // a supernet path the replicas (same seed, same sampling) all skipped
    std::vector<double> sum(static_cast<size_t>(g0.numel()), 0.0);
    for (size_t q = 0; q < copies.size(); ++q) {
      std::vector<double> gq = copies[q].params[i].second.grad().to_vector<double>();
      for (size_t e = 0; e < sum.size(); ++e) sum[e] += static_cast<double>(rows[q]) / n * gq[e];
    }
    Tensor mean = from_vector(sum, g0.shape(), g0.device()).to(g0.dtype());
    for (Copy& c : copies) c.params[i].second.set_grad(mean.clone());
  }
}

}  // namespace

BlockWeights reference_run(const RunContext& ctx, const std::vector<int>& replicas_in, bool dp_shards, Device device) {
  DeviceGuard on_device(device);
  const Workload& w = *ctx.workload;
  const int k = w.blocks();
  const std::vector<int> replicas = replicas_in.empty() ? std::vector<int>(static_cast<size_t>(k), 1) : replicas_in;
  const int64_t spe = steps_per_epoch(ctx), batch = ctx.train.batch;
  std::vector<models::ModulePtr> tblocks = w.make_teacher_blocks(ctx.train.teacher_bn);

  std::vector<std::vector<Copy>> copies(static_cast<size_t>(k));
  for (int b = 0; b < k; ++b)
    for (int q = 0; q < replicas[b]; ++q) {
      Copy c;
      c.module = w.make_students({b})[0];
      c.params = c.module->named_parameters(models::ParamKind::Weight);
      c.opt = optim::make_optimizer(ctx.train.optimizer, c.params);
      c.sched = std::make_unique<optim::LrScheduler>(
          *c.opt, optim::parse_lr_schedule(ctx.train.lr_schedule, spe, spe * ctx.train.epochs));
      copies[b].push_back(std::move(c));
    }
  std::set<int> factors(replicas.begin(), replicas.end());
  std::map<int, std::vector<std::unique_ptr<data::Loader>>> loaders;  // per factor: one, or one per shard
  if (dp_shards) {
    for (int g : factors)
      for (int q = 0; q < g; ++q) loaders[g].push_back(make_loader(ctx, batch / g, q, g));
  } else {
    loaders[1].push_back(make_loader(ctx, batch, 0, 1));
  }

  for (int64_t epoch = 0; epoch < ctx.train.epochs; ++epoch) {
    for (auto& [g, ls] : loaders)
      for (auto& l : ls) l->set_epoch(epoch);
    for (int64_t step = 0; step < spe; ++step) {
      Tensor full;
      if (!dp_shards) full = loaders[1][0]->next()->images.to(device);
      // Per factor g and copy q: the teacher chain on that copy's rows (chain[j]: the input of block j).
      std::map<int, std::vector<std::vector<Tensor>>> chains;
      for (int g : factors) {
        for (int q = 0; q < g; ++q) {
          std::vector<Tensor> chain;
          if (dp_shards) {
            chain.push_back(loaders[g][q]->next()->images.to(device));
          } else {
            data::RowRange r = data::rows_for(q, g, batch);
            chain.push_back(full.narrow(0, r.begin, r.count).contiguous());
          }
          autograd::NoGradGuard no_grad;
          for (int j = 0; j < k; ++j) chain.push_back(tblocks[j]->forward(chain.back()));
          chains[g].push_back(chain);
        }
      }
      for (int b = 0; b < k; ++b) {
        const int g = replicas[b];
        std::vector<int64_t> rows;
        for (int q = 0; q < g; ++q) {
          Copy& c = copies[b][q];
          const std::vector<Tensor>& chain = chains[g][q];
          c.module->zero_grad();
          Tensor out = c.module->forward(chain[b]);
          // Blockwise distillation's loss: MSE to the teacher's output of the block, soft-target cross-entropy
          // to the teacher's logits for the last block; each the mean over the replica's rows.
          Tensor loss =
              b + 1 == k ? models::soft_cross_entropy(out, chain[b + 1]) : models::mse_loss(out, chain[b + 1]);
          loss.backward();
          rows.push_back(chain[b].size(0));
        }
        if (g > 1) batch_mean_gradient(copies[b], rows);
        for (Copy& c : copies[b]) {
          c.opt->step();
          c.sched->step();
        }
      }
    }
  }
  BlockWeights out;
  for (int b = 0; b < k; ++b) {
    NamedTensors sd;
    for (auto& [name, t] : copies[b][0].module->state_dict()) sd.emplace_back(name, t.to(Device::cpu()).clone());
    out[b] = sd;
  }
  return out;
}

void expect_matches_reference(const BlockWeights& got, const RunContext& ctx, const Layout& layout,
                              const std::string& what, Device device) {
  std::vector<int> replicas(static_cast<size_t>(layout.blocks), 1);
  if (layout.strategy == Strategy::DP) replicas.assign(replicas.size(), layout.workers);
  if (layout.pipelined())
    for (const Stage& s : layout.plan.stages)
      for (int b = s.first; b <= s.last; ++b) replicas[static_cast<size_t>(b)] = s.replicas;
  const BlockWeights want = reference_run(ctx, replicas, layout.strategy == Strategy::DP, device);
  BlockWeights exact_got, exact_want, near_got, near_want;
  for (const auto& [b, sd] : want) {
    auto it = got.find(b);
    ASSERT_NE(it, got.end()) << what << ": block " << b << " missing";
    (replicas[static_cast<size_t>(b)] == 1 ? exact_want : near_want)[b] = sd;
    (replicas[static_cast<size_t>(b)] == 1 ? exact_got : near_got)[b] = it->second;
  }
  ASSERT_EQ(got.size(), want.size()) << what;
  expect_same_weights(exact_got, exact_want, what + " against the reference");
  EXPECT_LE(max_weight_error(near_got, near_want), kReplicatedTolerance)
      << what << ": replicated blocks against the reference";
}

BlockWeights run_in_process(const RunContext& ctx, const Layout& layout, StrategyResult* result,
                            MessageMatching matching, const std::string& spec) {
  std::vector<Worker> workers = make_workers(spec.empty() ? "cpu:" + std::to_string(layout.workers) : spec);
  TD_CHECK(static_cast<int>(workers.size()) == layout.workers, "worker spec '", spec, "' names ", workers.size(),
           " workers, the layout needs ", layout.workers);
  std::vector<std::shared_ptr<Communicator>> comms = make_local_group(workers, matching);
  // In issue order (as NCCL), the dependency signals go through their own group, as run_session does.
  std::vector<std::shared_ptr<Communicator>> signals;
  if (matching == MessageMatching::InIssueOrder) signals = make_local_group(workers);
  std::vector<StrategyResult> results(workers.size());
  run_on_workers(workers, [&](Worker& w) {
    results[w.rank] =
        run_strategy(ctx, layout, nullptr, w, *comms[w.rank], signals.empty() ? nullptr : signals[w.rank].get());
  });
  BlockWeights out;
  for (const StrategyResult& r : results)
    for (const auto& [b, sd] : r.local_blocks) {
      EXPECT_EQ(out.count(b), 0u) << "block " << b << " saved by two ranks";
      out[b] = sd;
    }
  if (result) *result = results[0];
  return out;
}

Plan make_plan(const std::vector<Stage>& stages) {
  Plan p;
  p.stages = stages;
  return p;
}

void expect_same_weights(const BlockWeights& got, const BlockWeights& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [b, sd] : want) {
    auto it = got.find(b);
    ASSERT_NE(it, got.end()) << what << ": block " << b << " missing";
    ASSERT_EQ(it->second.size(), sd.size()) << what << ": block " << b;
    for (size_t i = 0; i < sd.size(); ++i) {
      ASSERT_EQ(it->second[i].first, sd[i].first) << what;
      tandem::testing::expect_bitwise_equal(it->second[i].second, sd[i].second,
                                            what + ": block " + std::to_string(b) + " " + sd[i].first);
    }
  }
}

double max_weight_error(const BlockWeights& got, const BlockWeights& want) {
  double worst = 0;
  for (const auto& [b, sd] : want) {
    double scale = 0;
    for (const auto& nt : sd)
      if (is_floating(nt.second.dtype())) scale = std::max(scale, tandem::testing::max_magnitude(nt.second));
    for (size_t i = 0; i < sd.size(); ++i)
      if (is_floating(sd[i].second.dtype()))
        worst = std::max(worst, tandem::testing::max_rel_error(got.at(b)[i].second, sd[i].second, scale));
  }
  return worst;
}

}  // namespace testing
}  // namespace bd
}  // namespace parallel
}  // namespace tandem
