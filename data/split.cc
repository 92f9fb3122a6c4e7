// rows_for: the balanced contiguous split of a batch over a group.
#include "data/split.h"

#include "runtime/base/error.h"

namespace tandem {
namespace data {

RowRange rows_for(int64_t rank, int64_t group_size, int64_t rows) {
  TD_CHECK(group_size > 0, "rows_for: group size must be positive, got ", group_size);
  TD_CHECK(rank >= 0 && rank < group_size, "rows_for: rank ", rank, " is outside a group of ", group_size);
  TD_CHECK(rows >= 0, "rows_for: negative row count ", rows);
  int64_t base = rows / group_size, extra = rows % group_size;
  RowRange r;
  r.count = base + (rank < extra ? 1 : 0);
  r.begin = rank * base + (rank < extra ? rank : extra);
  return r;
}

}  // namespace data
}  // namespace tandem
