// Opening a run: finding its rank logs, checking their headers agree, and reading each rank one
// record ahead (truncation and out-of-order records noted as the run's issues).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

#include "differ/detail/read/rank_source.h"
#include "differ/detail/read/names.h"
#include "differ/detail/read/python_log.h"
#include "differ/detail/read/python_weights.h"
#include "differ/run.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace fs = std::filesystem;
namespace lf = probe::log_format;

namespace {

using RankFiles = std::vector<std::pair<int, fs::path>>;  // (rank from the directory name, path)

// A run directory's rank<R>/diff.log files by rank, or its own diff.log.
RankFiles rank_files_of_directory(const fs::path& path) {
  RankFiles files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string dir = entry.path().filename().string();
    if (!entry.is_directory() || dir.rfind("rank", 0) != 0) continue;
    int r = -1;
    auto digits = std::string_view(dir).substr(4);
    auto [p, e] = std::from_chars(digits.data(), digits.data() + digits.size(), r);
    if (e != std::errc() || p != digits.data() + digits.size() || r < 0) continue;
    if (fs::exists(entry.path() / "diff.log")) files.emplace_back(r, entry.path() / "diff.log");
  }
  if (ec) throw InputError("cannot list '" + path.string() + "': " + ec.message());
  if (files.empty() && fs::is_regular_file(path / "diff.log"))
    files.emplace_back(-1, path / "diff.log");
  // A NumericsLogger directory that logged weights only.
  if (files.empty() && fs::is_regular_file(path / "weights.log"))
    files.emplace_back(-1, path / "weights.log");
  if (files.empty())
    throw InputError("'" + path.string() +
                     "' holds no logs (expected rank<R>/diff.log files, a diff.log or a "
                     "NumericsLogger weights.log)");
  std::sort(files.begin(), files.end());
  return files;
}

// After a failed std::ifstream::open: the path and why (errno, which open(2) set).
std::string open_error(const fs::path& p) {
  const int err = errno;
  return "cannot open log file '" + p.string() +
         "': " + (err ? std::strerror(err) : "unknown reason");
}

bool is_numprobe_log(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string first(lf::kHeaderTag.size(), '\0');
  in.read(first.data(), static_cast<std::streamsize>(first.size()));
  return in.gcount() == static_cast<std::streamsize>(first.size()) && first == lf::kHeaderTag;
}

// A lone file that is no numprobe log: a NumericsLogger log when its first line is bracketed,
// or its weights.log when the line is "name=..."
bool is_python_log(const fs::path& file) {
  if (is_numprobe_log(file)) return false;
  errno = 0;
  std::ifstream probe_in(file);
  if (!probe_in) throw InputError(open_error(file));
  std::string first;
  std::getline(probe_in, first);
  if (first.empty() && probe_in.eof())
    throw InputError(file.string() + ":1: empty file (no numprobe header)");
  return !first.empty() && (first[0] == '[' || is_python_weights_line(first));
}

std::unique_ptr<LogReader> open_reader(const fs::path& file) {
  try {
    return std::make_unique<LogReader>(file);
  } catch (const lf::ParseError& e) {
    throw InputError(e.what());
  } catch (const std::runtime_error& e) {
    throw InputError(e.what());
  }
}

}  // namespace

Run::Run(const fs::path& path, RunOptions options)
    : path_(path),
      options_(std::move(options)),
      mapper_(std::make_unique<NameMapper>(options_.strip_wrappers, options_.map_rules)) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError("'" + path.string() + "' does not exist");
  const RankFiles files =
      fs::is_directory(path, ec) ? rank_files_of_directory(path) : RankFiles{{-1, path}};
  if (files.size() == 1 && is_python_log(files[0].second)) open_python_log(files[0].second);
  else open_rank_logs(files);
}

Run::~Run() = default;
Run::Run(Run&&) noexcept = default;

void Run::open_python_log(const fs::path& file) {
  python_ = true;
  auto src = std::make_unique<RankSource>();
  std::ifstream in(file);
  std::string first;
  std::getline(in, first);
  if (is_python_weights_line(first)) {
    src->python = load_python_weights(file, options_.lenient, issues_, options_.label);
  } else {
    src->python =
        load_python_log(file, options_.lenient, issues_, options_.label, options_.model_name);
    // NumericsLogger writes weights.log beside its diff.log: its blocks are `param` records.
    const fs::path weights = file.parent_path() / "weights.log";
    if (file.filename() != "weights.log" && fs::is_regular_file(weights)) {
      auto params = load_python_weights(weights, options_.lenient, issues_, options_.label);
      src->python.insert(src->python.end(), std::make_move_iterator(params.begin()),
                         std::make_move_iterator(params.end()));
      std::stable_sort(src->python.begin(), src->python.end(),
                       [](const Record& a, const Record& b) { return a.step < b.step; });
    }
  }
  ranks_.push_back(std::move(src));
  advance(*ranks_.back());
}

void Run::open_rank_logs(const RankFiles& files) {
  // More ranks than files to hold open: the first max_open - 1 stay open, the others are opened
  // for each step and closed again, one at a time (that one descriptor is the last of the budget).
  const int max_open =
      options_.max_open_files > 0 ? options_.max_open_files : default_max_open_files();
  const std::size_t keep_open = files.size() <= static_cast<std::size_t>(max_open)
                                    ? files.size()
                                    : static_cast<std::size_t>(std::max(max_open - 1, 0));
  bool first = true;
  std::vector<bool> seen;
  for (auto& [dir_rank, file] : files) {
    auto src = std::make_unique<RankSource>();
    src->reader = open_reader(file);
    if (ranks_.size() >= keep_open) {
      src->pooled = true;
      ++pooled_ranks_;
      src->release();
    }
    const auto& h = src->reader->header();
    if (first) {
      header_file_ = file;
      world_size_ = h.world_size;
      format_version_ = h.format_version;
      hash_spec_version_ = h.hash_spec_version;
      setup_ = h.setup;
      torch_version_ = h.torch_version;
      seen.assign(static_cast<std::size_t>(world_size_), false);
      first = false;
    } else {
      if (h.world_size != world_size_)
        throw InputError(file.string() +
                         ":1: header says world_size=" + std::to_string(h.world_size) + " but " +
                         files[0].second.string() + " says " + std::to_string(world_size_));
      if (h.hash_spec_version != hash_spec_version_)
        throw InputError(
            file.string() + ":1: hash spec version " + std::to_string(h.hash_spec_version) +
            " differs from the run's other ranks (" + std::to_string(hash_spec_version_) + ")");
    }
    if (dir_rank >= 0 && dir_rank != h.rank)
      throw InputError(file.string() + ":1: header says rank=" + std::to_string(h.rank) +
                       " but the directory says rank" + std::to_string(dir_rank));
    if (seen[static_cast<std::size_t>(h.rank)])
      throw InputError(file.string() + ":1: rank " + std::to_string(h.rank) +
                       " appears twice in the run");
    seen[static_cast<std::size_t>(h.rank)] = true;
    src->rank = h.rank;
    ranks_.push_back(std::move(src));
  }
  note_missing_ranks(files, seen);
  const bool read_ahead =
      options_.read_ahead && pooled_ranks_ == 0 && ranks_.size() <= RunOptions::kMaxReadAheadRanks;
  for (auto& src : ranks_) {
    if (read_ahead) src->read_ahead = std::make_unique<ReadAhead>(*src->reader);
    advance(*src);
    src->release();
  }
}

void Run::note_missing_ranks(const RankFiles& files, const std::vector<bool>& seen) {
  if (files.size() == 1 && files[0].first < 0 && world_size_ > 1) {
    // One log named on its own: that rank's view of the run, by request.
    partial_view_ = true;
    issues_.add({Issue::Severity::warning, "partial_run", options_.label, -1,
                 files[0].second.string() + " is rank " + std::to_string(ranks_[0]->rank) +
                     " of a " + std::to_string(world_size_) +
                     "-rank run: only that rank's records are compared (name the run's "
                     "directory to merge every rank)"});
    return;
  }
  for (int r = 0; r < world_size_; ++r) {
    if (seen[static_cast<std::size_t>(r)]) continue;
    ++missing_ranks_;
    issues_.add({Issue::Severity::error, "missing_rank", options_.label, -1,
                 path_.string() + ": world_size is " + std::to_string(world_size_) + " but " +
                     (path_ / ("rank" + std::to_string(r)) / "diff.log").string() +
                     " is missing (records that lack its shards are unsupported, not "
                     "compared)"});
  }
}

void Run::advance(RankSource& src) {
  if (!src.reader) {
    src.ahead = src.python_pos < src.python.size() ? &src.python[src.python_pos++] : nullptr;
    return;
  }
  for (;;) {
    ReadEvent& event = src.read_ahead ? src.read_ahead->next() : src.event;
    if (!src.read_ahead) read_event(*src.reader, event);
    switch (event.type) {
      case ReadEvent::Type::end:
        src.ahead = nullptr;
        if (src.reader->truncated()) note_truncation(src);
        return;
      case ReadEvent::Type::read_error:  // a pooled log that cannot be reopened
        src.ahead = nullptr;
        throw InputError(event.message);
      case ReadEvent::Type::parse_error:
        if (!options_.lenient) throw InputError(event.message);
        issues_.add({Issue::Severity::warning, "skipped_line", options_.label, -1, event.message});
        continue;
      case ReadEvent::Type::record: break;
    }
    Record& r = event.record;
    if (r.step < src.last_step) {
      std::string msg = src.reader->path().string() + ":" + std::to_string(event.line) + ": step " +
                        std::to_string(r.step) + " after step " + std::to_string(src.last_step) +
                        " (records out of step order)";
      if (!options_.lenient) throw InputError(msg);
      issues_.add({Issue::Severity::warning, "skipped_line", options_.label, r.step, msg});
      continue;
    }
    src.last_step = r.step;
    src.ahead = src.read_ahead ? &r : src.keep_for_step(r);
    src.ahead_line = event.line;
    return;
  }
}

// Without a worker, the event is read into again: its record moves to the rank's records of
// the step (swapping buffers with one of an earlier step), where the step merge points at it.
Record* Run::RankSource::keep_for_step(Record& r) {
  if (step_records_used == step_records.size()) step_records.emplace_back();
  Record& kept = step_records[step_records_used++];
  swap(kept, r);
  return &kept;
}

void Run::RankSource::release_step_records() {
  if (read_ahead) read_ahead->release_consumed();
  if (step_records_used == 0) return;
  // The record ahead (a later step's first) was kept last: it moves to the front and stays.
  Record& last = step_records[step_records_used - 1];
  step_records_used = 0;
  if (ahead != &last) return;
  swap(step_records[0], last);
  ahead = &step_records[0];
  step_records_used = 1;
}

// A rank's log that ends without its last step's end (format 2), mid-line, or with the
// probe's stop line (format 3): the first step that may be incomplete, from which on the runs
// are not compared.
void Run::note_truncation(const RankSource& src) {
  const LogReader& reader = *src.reader;
  std::int64_t from = 0;
  std::string where, what;
  if (const auto& stop = reader.stopped()) {
    // Format 3: the probe could not write step `stop->step` and said why.
    from = std::max(stop->step, src.last_step + 1);
    where = reader.path().string() + ":" + std::to_string(stop->line);
    what =
        "the probe stopped recording at step " + std::to_string(stop->step) + ": " + stop->reason;
  } else if (auto open = reader.unterminated()) {
    // Format 2: the step without its end is the incomplete one (when none of its lines
    // parsed, the step after the last complete one).
    from = open->step ? *open->step : src.last_step + 1;
    where = reader.path().string() + ":" + std::to_string(open->line);
    what = "step " + std::to_string(from) + " has no end marker (rank killed while writing it?)";
  } else {
    // Cut mid-line. The fragment's step (when readable) is the incomplete one; otherwise the
    // step after the last one a step end closed (format 2), or the rank's last step, which
    // may be missing records too (format 1).
    from = reader.header().format_version >= 2 ? src.last_step + 1
                                               : std::max<std::int64_t>(src.last_step, 0);
    std::string_view frag = reader.truncated_fragment();
    if (frag.substr(0, 5) == "step=") {
      frag.remove_prefix(5);
      std::int64_t s = -1;
      auto [p, ec] = std::from_chars(frag.data(), frag.data() + frag.size(), s);
      if (ec == std::errc() && p < frag.data() + frag.size() && *p == ' ' && s > src.last_step)
        from = s;
    }
    where = reader.path().string() + ":" + std::to_string(reader.line_number());
    what = "last line has no newline (rank killed?)";
  }
  if (!incomplete_from_ || from < *incomplete_from_) incomplete_from_ = from;
  issues_.add({Issue::Severity::warning, "truncated", options_.label, from,
               where + ": " + what + ": steps before " + std::to_string(from) +
                   " are used, later ones are not compared"});
}

std::optional<std::int64_t> Run::peek_step() const {
  std::optional<std::int64_t> s;
  for (const auto& src : ranks_)
    if (src->ahead && (!s || src->ahead->step < *s)) s = src->ahead->step;
  return s;
}

std::filesystem::path Run::rank_dir(int rank) const {
  for (const auto& src : ranks_)
    if (src->rank == rank && src->reader) return src->reader->path().parent_path();
  return {};
}

bool Run::step_compiled(std::int64_t step) const {
  return std::any_of(ranks_.begin(), ranks_.end(), [step](const auto& src) {
    return src->reader && src->reader->step_compiled(step);
  });
}

}  // namespace probe::differ
