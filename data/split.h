// Row splits: how a batch (or an epoch) is divided among the ranks of a group, one rule everywhere.
#pragma once

#include <cstdint>

namespace tandem {
namespace data {

struct RowRange {
  int64_t begin = 0;
  int64_t count = 0;
  int64_t end() const { return begin + count; }
};

// Rows [begin, begin + count) of a batch of `rows` that rank `rank` of `group_size` takes. Ranks get
// contiguous ranges in rank order; the first rows % group_size ranks get one row more than the others
// (256 rows over 3 ranks: 86, 85, 85 starting at 0, 86, 171). Ranges are disjoint and cover the batch;
// ranks past the rows get empty ranges. Throws ValueError for a bad rank, group size or row count.
RowRange rows_for(int64_t rank, int64_t group_size, int64_t rows);

}  // namespace data
}  // namespace tandem
