// The readers under fuzzing: each turns one input (bytes) into files or a spec string, reads it through Tandem's
// reader, and returns the typed error it raised. Shared by the libFuzzer targets and the regression test that
// replays their crashes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem {
namespace fuzz {

// "idx", "cifar", "image", "packed", "safetensors", "checkpoint", "spec".
const std::vector<std::string>& reader_names();

// The outcome of one input: accepted (every sample read), or rejected with a Tandem error.
struct Outcome {
  bool accepted = false;
  std::string error;  // what() of the tandem::Error, when rejected
};

// Reads `data` with the named reader. Tandem errors are the readers' answer and come back in the Outcome;
// anything else (std::bad_alloc, another exception, a sanitizer report) escapes: that is the bug fuzzing finds.
//   idx:         bytes 0-1 (u16 LE) give the label file's length L; the label file is bytes 2..2+L, the image
//                file the rest
//   cifar:       a CIFAR-10 test_batch.bin when the size is even, else a CIFAR-100 test.bin
//   image:       an image folder holding the input as its one file (read as the loader does, then decoded
//                once more keeping the file's channels)
//   packed:      one .tdrec shard, read as given and once more with its checksums made valid (so the fuzzer
//                gets past them to the fields they protect)
//   safetensors: load_safetensors
//   checkpoint:  load_checkpoint into a small network (conv, batch norm, dropout, linear) with Adam and a
//                learning-rate scheduler
//   spec:        byte 0 (modulo 5) picks a grammar, the rest is the spec: 0 the spec reader itself (a positional
//                item and keys of every getter), 1 a model spec, 2 a synthetic dataset, 3 transforms, 4 a
//                learning-rate schedule
Outcome read_input(const std::string& reader, const uint8_t* data, size_t size);

// Small valid inputs for a reader (name, bytes): the fuzzer's starting corpus, and proof that the harness
// accepts well-formed files.
std::vector<std::pair<std::string, std::vector<uint8_t>>> seed_inputs(const std::string& reader);

}  // namespace fuzz
}  // namespace tandem
