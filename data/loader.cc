// Loader: the task queue of batches, worker threads, the pinned host-buffer pool and the copy stream.
#include "data/loader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "data/split.h"
#include "runtime/base/error.h"
#include "runtime/base/parallel_for.h"
#include "runtime/base/philox.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/rng.h"

namespace tandem {
namespace data {
namespace {

// A host batch and the event of the copy that reads it (null on the CPU or before its first copy).
struct HostBuffer {
  Tensor images, labels;
  std::shared_ptr<Event> copied;
  // Nobody else holds the tensors (copies share the TensorImpl, views share the Storage) and the copy is done.
  bool free() const {
    auto unshared = [](const Tensor& t) { return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1; };
    return unshared(images) && unshared(labels) && (!copied || copied->query());
  }
};

struct Ready {
  Batch batch;
  std::shared_ptr<Event> copied;
  std::exception_ptr error;
};

}  // namespace

struct Loader::State {
  std::shared_ptr<const Dataset> dataset;
  Pipeline pipeline;
  LoaderOptions o;
  int64_t n = 0;
  RowRange shard;
  int64_t batches = 0;
  Shape image_shape;
  int64_t image_numel = 0;
  bool pinned = false;
  Stream copy_stream;

  // Epoch permutations, shared by the workers (the last few epochs are kept).
  std::mutex perm_mu;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> perms;

  // Tasks are numbered from batch 0 of base_epoch; task t is batch t % batches of epoch base_epoch + t / batches.
  std::mutex mu;
  std::condition_variable work_cv, ready_cv;
  bool stop = false;
  uint64_t generation = 0;  // bumped by set_epoch: results of older tasks are dropped
  int64_t base_epoch = 0;
  int64_t next_task = 0;  // the next task a worker takes
  int64_t consumed = 0;   // the next task next() returns
  int64_t depth = 1;      // tasks taken but not yet consumed, at most
  std::map<int64_t, Ready> ready;
  bool epoch_end_pending = false;
  std::vector<std::thread> workers;

  std::mutex pool_mu;
  std::vector<HostBuffer> pool;
  size_t pool_cap = 8;

  // Statistics (under mu).
  double first_call_s = -1, last_return_s = 0, waited_s = 0;
  int64_t delivered = 0;

  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch);
  HostBuffer acquire(int64_t rows);
  void release(HostBuffer buffer);
  Ready produce(int64_t epoch, int64_t index);
  void worker_loop();
};

std::shared_ptr<const std::vector<int64_t>> Loader::State::permutation(int64_t epoch) {
  std::lock_guard<std::mutex> lock(perm_mu);
  auto it = perms.find(epoch);
  if (it != perms.end()) return it->second;
  auto perm = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(n));
  std::iota(perm->begin(), perm->end(), int64_t{0});
  if (o.shuffle) {
    // Fisher-Yates from a Philox stream keyed by (seed, epoch), distinct from the augmentation streams.
    philox::Block b = philox::generate(o.seed, 0x5B0FF1E000000000ull ^ static_cast<uint64_t>(epoch));
    Generator gen((static_cast<uint64_t>(b.x[0]) << 32) | b.x[1], 0);
    for (int64_t i = n - 1; i > 0; --i) std::swap((*perm)[i], (*perm)[gen.integer(static_cast<uint64_t>(i + 1))]);
  }
  perms[epoch] = perm;
  while (perms.size() > 3) perms.erase(perms.begin());
  return perm;
}

HostBuffer Loader::State::acquire(int64_t rows) {
  {
    std::lock_guard<std::mutex> lock(pool_mu);
    for (size_t i = 0; i < pool.size(); ++i) {
      if (pool[i].images.size(0) == rows && pool[i].free()) {
        HostBuffer b = std::move(pool[i]);
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(i));
        return b;
      }
    }
  }
  HostBuffer b;
  Shape shape{rows};
  shape.insert(shape.end(), image_shape.begin(), image_shape.end());
  TensorOptions host = TensorOptions(DType::F32).with_device(Device::cpu()).with_pinned(pinned);
  b.images = empty(shape, host);
  b.labels = empty({rows}, host.with_dtype(DType::I64));
  return b;
}

void Loader::State::release(HostBuffer buffer) {
  std::lock_guard<std::mutex> lock(pool_mu);
  if (pool.size() >= pool_cap) {
    // Evict a free buffer of another size, else drop this one (after its copy, which reads it).
    auto it = std::find_if(pool.begin(), pool.end(), [](const HostBuffer& b) { return b.free(); });
    if (it == pool.end()) {
      if (buffer.copied) buffer.copied->synchronize();
      return;
    }
    pool.erase(it);
  }
  pool.push_back(std::move(buffer));
}

Ready Loader::State::produce(int64_t epoch, int64_t index) {
  Ready r;
  r.batch.epoch = epoch;
  r.batch.index = index;
  const int64_t lo = index * o.batch_size, hi = std::min(lo + o.batch_size, shard.count);
  const RowRange mine = rows_for(o.split_rank, o.split_size, hi - lo);
  auto perm = permutation(epoch);
  HostBuffer host = acquire(mine.count);
  float* images = host.images.data<float>();
  int64_t* labels = host.labels.data<int64_t>();
  for (int64_t i = 0; i < mine.count; ++i) {
    const int64_t sample = (*perm)[static_cast<size_t>(shard.begin + lo + mine.begin + i)];
    Sample s = dataset->get(sample);
    TD_CHECK_INDEX(s.label >= 0 && s.label < dataset->num_classes(), dataset->describe(), ": sample ", sample,
                   " has label ", s.label, ", outside [0, ", dataset->num_classes(), ")");
    Shape out = pipeline.output_shape(s.image.height, s.image.width, s.image.channels);
    TD_CHECK_SHAPE(out == image_shape, dataset->describe(), ": sample ", sample, " (", s.image.height, "x",
                   s.image.width, "x", s.image.channels, ") transforms to ", shape_str(out), " but the batch holds ",
                   shape_str(image_shape), "; add a resize or center crop to the transforms");
    Generator gen = sample_generator(o.seed, epoch, sample);
    pipeline.apply(s.image, gen, images + i * image_numel);
    labels[i] = s.label;
  }
  if (o.device.is_cpu()) {
    r.batch.images = host.images;
    r.batch.labels = host.labels;
  } else {
    r.batch.images = host.images.to(o.device, copy_stream);
    r.batch.labels = host.labels.to(o.device, copy_stream);
    r.copied = std::make_shared<Event>();
    r.copied->record(copy_stream);
    host.copied = r.copied;
  }
  release(std::move(host));
  return r;
}

void Loader::State::worker_loop() {
  set_intra_op_threads(1);  // the workers, not loops inside them, share the cores
  for (;;) {
    int64_t task, epoch;
    uint64_t gen;
    {
      std::unique_lock<std::mutex> lock(mu);
      work_cv.wait(lock, [&] { return stop || next_task < consumed + depth; });
      if (stop) return;
      task = next_task++;
      gen = generation;
      epoch = base_epoch + task / batches;
    }
    Ready r;
    try {
      r = produce(epoch, task % batches);
    } catch (...) {
      r.error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu);
    if (gen != generation) continue;
    ready.emplace(task, std::move(r));
    ready_cv.notify_all();
  }
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, Pipeline pipeline, LoaderOptions options)
    : s_(std::make_unique<State>()) {
  TD_CHECK(dataset != nullptr, "Loader: null dataset");
  State& s = *s_;
  const LoaderOptions& o = options;
  TD_CHECK(o.batch_size > 0, "Loader: batch_size must be positive, got ", o.batch_size);
  TD_CHECK(o.num_workers >= 0, "Loader: num_workers must be >= 0, got ", o.num_workers);
  TD_CHECK(o.prefetch >= 1, "Loader: prefetch must be >= 1, got ", o.prefetch);
  TD_CHECK(o.num_shards >= 1 && o.shard_rank >= 0 && o.shard_rank < o.num_shards, "Loader: shard ", o.shard_rank,
           " of ", o.num_shards, " does not exist");
  TD_CHECK(o.split_size >= 1 && o.split_rank >= 0 && o.split_rank < o.split_size, "Loader: split rank ", o.split_rank,
           " of a group of ", o.split_size, " does not exist");
  check_device_available(o.device);
  s.dataset = std::move(dataset);
  s.pipeline = std::move(pipeline);
  s.o = o;
  s.n = s.dataset->size();
  TD_CHECK(s.n > 0, "Loader: ", s.dataset->describe(), " is empty");
  s.shard = rows_for(o.shard_rank, o.num_shards, s.n);
  if (o.drop_last) {
    s.batches = (s.n / o.num_shards) / o.batch_size;
    TD_CHECK(s.batches > 0, "Loader: ", s.dataset->describe(), " split over ", o.num_shards,
             " shard(s) has no full batch of ", o.batch_size, " (drop_last is on)");
  } else {
    s.batches = (s.shard.count + o.batch_size - 1) / o.batch_size;
    TD_CHECK(s.batches > 0, "Loader: shard ", o.shard_rank, " of ", o.num_shards, " of ", s.dataset->describe(),
             " is empty");
  }
  // Sample 0 fixes the batch's image shape (and checks that the transforms accept the dataset).
  Sample first = s.dataset->get(0);
  s.image_shape = s.pipeline.output_shape(first.image.height, first.image.width, first.image.channels);
  s.image_numel = shape_numel(s.image_shape);
  s.pinned = o.device.is_cuda();
  if (o.device.is_cuda()) s.copy_stream = Stream::create(o.device);
  s.base_epoch = o.first_epoch;
  s.depth = std::max(o.prefetch, o.num_workers);
  s.pool_cap = static_cast<size_t>(2 * s.depth + 2);
  for (int i = 0; i < o.num_workers; ++i) s.workers.emplace_back([this] { s_->worker_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->stop = true;
  }
  s_->work_cv.notify_all();
  for (std::thread& t : s_->workers) t.join();
  // Host buffers must outlive the copies that read them.
  for (HostBuffer& b : s_->pool)
    if (b.copied) {
      try {
        b.copied->synchronize();
      } catch (const std::exception&) {
        // A failed device reports its error elsewhere; destructors never throw.
      }
    }
}

std::optional<Batch> Loader::next() {
  State& s = *s_;
  Ready r;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    double now = host_time_s();
    if (s.first_call_s < 0) s.first_call_s = now;
    if (s.epoch_end_pending) {
      s.epoch_end_pending = false;
      return std::nullopt;
    }
    const int64_t task = s.consumed;
    if (s.workers.empty()) {
      s.next_task = task + 1;
      const int64_t epoch = s.base_epoch + task / s.batches;
      lock.unlock();
      try {
        r = s.produce(epoch, task % s.batches);
      } catch (...) {
        r.error = std::current_exception();
      }
      lock.lock();
    } else {
      auto it = s.ready.find(task);
      if (it == s.ready.end()) {
        s.ready_cv.wait(lock, [&] { return s.ready.count(task) > 0; });
        it = s.ready.find(task);
        s.waited_s += host_time_s() - now;
      }
      r = std::move(it->second);
      s.ready.erase(it);
    }
    s.consumed = task + 1;
    if (s.consumed % s.batches == 0) s.epoch_end_pending = true;
    if (!r.error) s.delivered += r.batch.images.size(0);
    s.last_return_s = host_time_s();
  }
  s.work_cv.notify_all();
  if (r.error) std::rethrow_exception(r.error);
  // The batch was allocated on the copy stream (on the CPU: by a loader thread) and is used on the compute stream
  // from here on.
  Stream compute = current_stream(s.o.device);
  if (r.copied) compute.wait(*r.copied);
  r.batch.images.storage().record_stream(compute);
  r.batch.labels.storage().record_stream(compute);
  return std::move(r.batch);
}

void Loader::set_epoch(int64_t epoch) {
  State& s = *s_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.generation;
    s.ready.clear();
    s.base_epoch = epoch;
    s.next_task = 0;
    s.consumed = 0;
    s.epoch_end_pending = false;
  }
  s.work_cv.notify_all();
}

int64_t Loader::epoch() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  // While the end of an epoch is pending, the epoch that ends is still the current one.
  return s_->base_epoch + (s_->consumed - (s_->epoch_end_pending ? 1 : 0)) / s_->batches;
}

int64_t Loader::batches_per_epoch() const { return s_->batches; }
int64_t Loader::shard_size() const { return s_->shard.count; }
Shape Loader::image_shape() const { return s_->image_shape; }
const LoaderOptions& Loader::options() const { return s_->o; }
const Dataset& Loader::dataset() const { return *s_->dataset; }

double Loader::images_per_second() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  double elapsed = s_->last_return_s - s_->first_call_s;
  return s_->first_call_s < 0 || elapsed <= 0 ? 0.0 : static_cast<double>(s_->delivered) / elapsed;
}

double Loader::wait_seconds() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->waited_s;
}

int64_t Loader::pinned_pool_bytes() const {
  std::lock_guard<std::mutex> lock(s_->pool_mu);
  int64_t bytes = 0;
  for (const HostBuffer& b : s_->pool)
    for (const Tensor* t : {&b.images, &b.labels})
      if (t->storage().pinned()) bytes += static_cast<int64_t>(t->nbytes());
  return bytes;
}

}  // namespace data
}  // namespace tandem
