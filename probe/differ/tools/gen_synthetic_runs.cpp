// gen_synthetic_runs: writes a synthetic numprobe run (rank<R>/diff.log per rank) in one of
// several parallel layouts, with optional injected divergences, for diff_logs' tests and
// benchmarks. Every layout of the same model, steps and variant describes the same logical
// tensors: shards compose to the whole tensor's hash and figures.
//
// Model: P parameters "layers.<i>.w" of global shape [8*B, C]; each of the 8 row blocks has
// deterministic figures (hash, sum of squares, min, max, sum) per (step, param, mb).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <vector>

#include "probe/log_format.h"
#include "probe/record.h"

namespace lf = probe::log_format;
using probe::Kind;
using probe::Record;

namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
double unit(std::uint64_t x) { return static_cast<double>(mix(x) >> 11) * 0x1.0p-53; }

constexpr int kBlocks = 8;

struct Config {
  std::string layout = "zero3";  // single, ddp, zero3, pp
  int world = 8, stages = 2;
  int steps = 1000, params = 500, mbs = 8, block_rows = 4, cols = 16;
  bool mb_grads = false, forward = true;
  bool pp_renumber = false;      // pipeline stages number their layers from 0
  std::string variant = "none";  // none, sum_order, rng, none_grads, nan, loss_ulp, unreduced
  int at_step = 3;
  int param = 1;
};

struct Block {
  std::uint64_t hash;
  double sumsq, min, max, sum;
  std::int64_t nan = 0;
};

// Figures of row block `b` of a tensor identified by `id`.
Block block(std::uint64_t id, int b, int rows, int cols) {
  std::uint64_t k = mix(id * 8 + static_cast<std::uint64_t>(b));
  const double n = rows * cols;
  Block out;
  out.hash = mix(k ^ 0x1234);
  const double scale = 0.01 + unit(k + 1);
  out.sumsq = n * scale * scale * (0.5 + 0.5 * unit(k + 2));
  out.min = -scale * (1 + unit(k + 3));
  out.max = scale * (1 + unit(k + 4));
  out.sum = n * scale * (unit(k + 5) - 0.5) * 0.1;
  return out;
}

struct Tensor {
  std::uint64_t id;
  bool perturb = false;  // summation-order-sized change: other hash, norm * (1 + 1e-7)
  bool nan = false;
};

Record tensor_record(const Config& c, std::int64_t step, Kind kind, const std::string& name,
                     std::optional<std::int64_t> mb, const Tensor& t, int first_block,
                     int nblocks) {
  Record r;
  r.step = step;
  r.kind = kind;
  r.name = name;
  r.microbatch = mb;
  auto& s = r.stats;
  s.dtype = "float32";
  double sumsq = 0, sum = 0;
  s.min = INFINITY;
  s.max = -INFINITY;
  for (int b = first_block; b < first_block + nblocks; ++b) {
    Block k = block(t.id, b, c.block_rows, c.cols);
    if (t.perturb) k.hash = mix(k.hash);
    s.hash += k.hash;
    sumsq += k.sumsq;
    sum += k.sum;
    s.min = std::min(s.min, k.min);
    s.max = std::max(s.max, k.max);
  }
  const double n = static_cast<double>(nblocks) * c.block_rows * c.cols;
  s.norm = std::sqrt(sumsq) * (t.perturb ? 1 + 1e-7 : 1.0);
  s.mean = sum / n;
  if (t.nan && first_block == 0) {
    s.nan = 1;
    s.norm = NAN;
    s.hash = mix(s.hash);
  }
  s.shape = {static_cast<std::int64_t>(nblocks) * c.block_rows, c.cols};
  if (nblocks != kBlocks)
    s.shard = probe::Shard{{kBlocks * static_cast<std::int64_t>(c.block_rows), c.cols},
                           {static_cast<std::int64_t>(first_block) * c.block_rows, 0}};
  return r;
}

std::uint64_t tid(int step, int kind, int param, int mb) {
  return mix((static_cast<std::uint64_t>(step) << 40) ^ (static_cast<std::uint64_t>(kind) << 32) ^
             (static_cast<std::uint64_t>(param) << 12) ^ static_cast<std::uint64_t>(mb + 1));
}

// Who holds what: pipeline stages own contiguous parameters, data-parallel replicas own
// microbatches.
struct Layout {
  const Config& c;
  int stages = c.layout == "pp" ? c.stages : 1;
  int dp = c.world / stages;

  int stage_of(int p) const { return p * stages / c.params; }
  // Stage-major, as moe_train and torchtitan lay out a pipeline: stage s is ranks s*dp ..
  // s*dp+dp-1.
  int rank_of(int stage, int d) const { return stage * dp + d; }
  int dp_of_mb(int mb) const { return mb % dp; }
  int first_of_stage(int stage) const {  // smallest p with stage_of(p) == stage
    int p = 0;
    while (p < c.params && stage_of(p) < stage) ++p;
    return p;
  }
  std::string layer_name(int p) const {
    const int shown = c.layout == "pp" && c.pp_renumber ? p - first_of_stage(stage_of(p)) : p;
    return "layers." + std::to_string(shown) + ".w";
  }
};

// Each rank's diff.log, a step at a time, closed by its step end as LogWriter does.
class RunWriter {
 public:
  RunWriter(const std::string& out_dir, const Config& c)
      : files_(static_cast<std::size_t>(c.world)), buf_(files_.size()), lines_(files_.size()) {
    for (int r = 0; r < c.world; ++r) {
      auto path = std::filesystem::path(out_dir) / ("rank" + std::to_string(r)) / "diff.log";
      std::filesystem::create_directories(path.parent_path());
      files_[static_cast<std::size_t>(r)].open(path, std::ios::binary);
      lf::Header h;
      h.rank = r;
      h.world_size = c.world;
      h.torch_version = "synthetic";
      h.setup = c.layout + " x" + std::to_string(c.world) + " variant=" + c.variant;
      files_[static_cast<std::size_t>(r)] << lf::format_header(h) << "\n";
    }
  }

  void emit(int rank, const Record& r) {
    const auto i = static_cast<std::size_t>(rank);
    buf_[i] += lf::format_record(r);
    buf_[i] += '\n';
    ++lines_[i];
  }

  void end_step(int step) {
    for (std::size_t i = 0; i < files_.size(); ++i) {
      if (lines_[i] == 0) continue;  // as LogWriter: a step without records writes nothing
      buf_[i] += lf::format_step_end(step, static_cast<std::int64_t>(lines_[i]));
      buf_[i] += '\n';
      files_[i] << buf_[i];
      buf_[i].clear();
      lines_[i] = 0;
    }
  }

  bool close() {
    bool ok = true;
    for (auto& f : files_) ok = static_cast<bool>(f.flush()) && ok;
    return ok;
  }

 private:
  std::vector<std::ofstream> files_;
  std::vector<std::string> buf_;
  std::vector<std::size_t> lines_;  // records in buf_
};

// A microbatch's forward records (rng, input, output) and its mb_grads, last parameter first.
void write_microbatch(const Config& c, const Layout& l, RunWriter& w, int step, int mb) {
  const bool on = step >= c.at_step;
  const int d = l.dp_of_mb(mb);
  if (c.forward) {
    Tensor rng{tid(step, 0, 0, mb)};
    if (c.variant == "rng" && on && mb == 0) rng.id = mix(rng.id);
    Tensor in{tid(step, 1, 0, mb)};
    Tensor out{tid(step, 2, 0, mb)};
    if (c.variant == "rng" && on) out.id = mix(out.id);
    w.emit(l.rank_of(0, d), tensor_record(c, step, Kind::rng, "cuda_rng", mb, rng, 0, kBlocks));
    w.emit(l.rank_of(0, d), tensor_record(c, step, Kind::input, "tokens", mb, in, 0, kBlocks));
    w.emit(l.rank_of(l.stages - 1, d),
           tensor_record(c, step, Kind::output, "logits", mb, out, 0, kBlocks));
  }
  if (!c.mb_grads) return;
  for (int p = c.params - 1; p >= 0; --p) {  // backward: last parameter first
    Tensor g{tid(step, 5, p, mb)};
    if (c.variant == "rng" && on) g.id = mix(g.id);
    w.emit(l.rank_of(l.stage_of(p), d),
           tensor_record(c, step, Kind::mb_grad, l.layer_name(p), mb, g, 0, kBlocks));
  }
}

// Every parameter's accumulated grad: under zero3 each rank holds 1/world of it.
void write_grads(const Config& c, const Layout& l, RunWriter& w, int step) {
  const bool on = step >= c.at_step;
  for (int p = 0; p < c.params; ++p) {
    const std::string name = (c.layout == "ddp"     ? "module."
                              : c.layout == "zero3" ? "_fsdp_wrapped_module."
                                                    : "") +
                             l.layer_name(p);
    Tensor g{tid(step, 6, p, 0)};
    if (c.variant == "sum_order" && on && p == c.param) g.perturb = true;
    if (c.variant == "rng" && on) g.id = mix(g.id);
    if (c.variant == "nan" && on && p == c.param) g.nan = true;
    const bool none = c.variant == "none_grads" && on;
    // A skipped all-reduce: each data-parallel replica keeps a gradient of its own.
    const bool unreduced = c.variant == "unreduced" && on && p == c.param;
    for (int d = 0; d < l.dp; ++d) {
      const bool zero3 = c.layout == "zero3";
      const int per = kBlocks / c.world;
      Tensor local = g;
      if (unreduced) local.id = mix(g.id + static_cast<std::uint64_t>(d) + 1);
      Record rec = zero3
                       ? tensor_record(c, step, Kind::grad, name, std::nullopt, g, d * per, per)
                       : tensor_record(c, step, Kind::grad, name, std::nullopt, local, 0, kBlocks);
      if (none) rec.state = Record::State::none;
      w.emit(zero3 ? d : l.rank_of(l.stage_of(p), d), rec);
    }
  }
}

// The loss and learning rate, on every rank (replicated after the all-reduce).
void write_scalars(const Config& c, RunWriter& w, int step) {
  const bool on = step >= c.at_step;
  for (int r = 0; r < c.world; ++r) {
    Record loss;
    loss.step = step;
    loss.kind = Kind::scalar;
    loss.name = "loss";
    loss.state = Record::State::scalar;
    loss.value = 2.5 / (1 + 0.01 * step);
    if (c.variant == "loss_ulp" && step == c.at_step) loss.value = std::nextafter(loss.value, 10.0);
    if (c.variant == "rng" && on) loss.value *= 1.001;
    w.emit(r, loss);
    loss.name = "lr";
    loss.value = 1e-3;
    w.emit(r, loss);
  }
}

// The layout's constraints; an error message, empty when they hold.
std::string layout_error(const Config& c) {
  if (c.layout == "zero3" && kBlocks % c.world != 0) return "zero3 needs a world size dividing 8";
  if (c.layout == "pp" && (c.world % c.stages != 0 || c.stages > c.params))
    return "pp needs world divisible by stages and params >= stages";
  if (c.variant == "unreduced" && c.layout != "ddp" && c.layout != "pp")
    return "--variant unreduced needs data-parallel replicas of a gradient: the ddp or pp layout";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  std::string out_dir;
  CLI::App app{"gen_synthetic_runs: write a synthetic numprobe run directory"};
  app.add_option("out", out_dir, "run directory to create (rank<R>/diff.log inside)")->required();
  app.add_option("--layout", c.layout, "single, ddp, zero3 or pp (pipeline x data parallel)")
      ->check(CLI::IsMember({"single", "ddp", "zero3", "pp"}));
  app.add_option("--world", c.world, "ranks (1, 2, 4 or 8 for zero3)");
  app.add_option("--stages", c.stages, "pipeline stages (pp layout; world is stages x dp)");
  app.add_option("--steps", c.steps, "steps");
  app.add_option("--params", c.params, "parameters");
  app.add_option("--mbs", c.mbs, "microbatches per step (global ids)");
  app.add_option("--block-rows", c.block_rows, "rows per row block (8 blocks per parameter)");
  app.add_flag("--mb-grads", c.mb_grads, "log mb_grad records (one per parameter and microbatch)");
  app.add_flag("!--no-forward", c.forward, "omit rng/input/output records");
  app.add_flag("--pp-renumber", c.pp_renumber, "pp layout: each stage numbers its layers from 0");
  app.add_option(
         "--variant", c.variant,
         "none, sum_order, rng, none_grads, nan, loss_ulp, unreduced (a grad left unreduced "
         "over data-parallel replicas: ddp and pp layouts)")
      ->check(CLI::IsMember(
          {"none", "sum_order", "rng", "none_grads", "nan", "loss_ulp", "unreduced"}));
  app.add_option("--at-step", c.at_step, "step where the variant starts");
  app.add_option("--param", c.param, "parameter the variant touches");
  CLI11_PARSE(app, argc, argv);
  if (c.layout == "single") c.world = 1;
  if (const std::string e = layout_error(c); !e.empty()) {
    std::cerr << e << "\n";
    return 2;
  }
  const Layout layout{c};
  RunWriter w(out_dir, c);
  for (int step = 0; step < c.steps; ++step) {
    for (int mb = 0; mb < c.mbs; ++mb) write_microbatch(c, layout, w, step, mb);
    write_grads(c, layout, w, step);
    write_scalars(c, w, step);
    w.end_step(step);
  }
  if (!w.close()) {
    std::cerr << "write failed\n";
    return 1;
  }
  return 0;
}
