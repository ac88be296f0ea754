// Short texts of records for issue messages.
#include "differ/detail/read/record_text.h"

#include "probe/log_format.h"

namespace probe::differ {
namespace lf = probe::log_format;

std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string record_brief(const Record& r) {
  switch (r.state) {
    case Record::State::none: return "none";
    case Record::State::scalar: return "value=" + lf::format_double(r.value);
    case Record::State::tensor: break;
  }
  if (r.stats.unsupported) return "unsupported=" + *r.stats.unsupported;
  std::string s =
      "hash=" + lf::format_hash(r.stats.hash) + " norm=" + lf::format_double(r.stats.norm);
  if (r.stats.nan || r.stats.inf)
    s += " nan=" + std::to_string(r.stats.nan) + " inf=" + std::to_string(r.stats.inf);
  return s;
}

std::string key_text(Kind kind, const std::string& name, std::optional<std::int64_t> mb) {
  std::string s(kind_name(kind));
  s += ' ';
  s += name;
  if (mb) s += " mb=" + std::to_string(*mb);
  return s;
}

}  // namespace probe::differ
