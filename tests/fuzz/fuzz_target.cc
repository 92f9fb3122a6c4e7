// libFuzzer entry point of one reader's fuzz target; tools/fuzz.py compiles it once per reader with
// -DTANDEM_FUZZ_READER='"name"' (see tests/fuzz/fuzz_readers.h for how each reader reads an input).
#include <cstdlib>
#include <string>

#include "tests/data_loading/dataset_files.h"
#include "tests/fuzz/fuzz_readers.h"

#ifndef TANDEM_FUZZ_READER
#error "compile with -DTANDEM_FUZZ_READER='\"idx\"' (or another name of tandem::fuzz::reader_names())"
#endif

// With TANDEM_FUZZ_SEED_DIR set, writes the reader's seed inputs there first: the corpus starts from them.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("TANDEM_FUZZ_SEED_DIR");
  if (dir != nullptr && dir[0] != '\0')
    for (const auto& seed : tandem::fuzz::seed_inputs(TANDEM_FUZZ_READER))
      tandem::testdata::write_file(std::string(dir) + "/seed-" + seed.first, seed.second);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::fuzz::read_input(TANDEM_FUZZ_READER, data, size);
  return 0;
}
