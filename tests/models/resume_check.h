// The check both trainer resume tests make (CPU and GPU): an interrupted and resumed run repeats the straight run.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "tools/train/trainer.h"

namespace tandem {
namespace testing {

// Trains `o` straight through, then again stopped after its first epoch (writing `checkpoint`) and resumed from
// it, and expects `steps` step losses, the same bits in both runs and all finite. `after_first_epoch`, when
// given, runs between the interrupted run and its resumption (to check the checkpoint itself).
void expect_resume_repeats_run(const train::TrainOptions& o, const std::string& checkpoint, size_t steps,
                               const std::function<void()>& after_first_epoch = nullptr);

}  // namespace testing
}  // namespace tandem
