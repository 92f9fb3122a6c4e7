// load_average() read from /proc/loadavg.
#include "bench/load_average.h"

#include <cstdio>

namespace tandem {

double load_average() {
  double l = -1;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1;
    std::fclose(f);
  }
  return l;
}

}  // namespace tandem
