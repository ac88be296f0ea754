// diff_logs --html: the page's data model (the --json document, the heat map grid, the
// curves) and the self-contained page around it.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <unordered_map>

#include "differ/report_html.h"
#include "differ/detail/report/html_assets.h"
#include "probe/log_format.h"

namespace probe::differ {

namespace {

using nlohmann::json;

// Heat map row groups, in display order.
int row_group(Kind k) {
  switch (k) {
    case Kind::param: return 0;  // a parameter's value, its grad, its mb_grads together
    case Kind::grad: return 0;
    case Kind::mb_grad: return 0;  // beside its parameter's grad
    case Kind::rng: return 1;
    case Kind::input: return 1;
    case Kind::output: return 1;
    case Kind::tap: return 1;
    case Kind::output_grad: return 2;
    case Kind::scalar: return 3;
    case Kind::optim: return 4;
    case Kind::op: return 4;  // traced ops last, in execution order
  }
  return 4;
}

int forward_kind_order(Kind k) {
  switch (k) {
    case Kind::rng: return 0;
    case Kind::input: return 1;
    case Kind::output: return 2;
    case Kind::tap: return 3;
    default: return 4;
  }
}

std::string base64(const void* data, std::size_t size) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (std::size_t i = 0; i < size; i += 3) {
    const std::uint32_t b = static_cast<std::uint32_t>(p[i]) << 16 |
                            (i + 1 < size ? static_cast<std::uint32_t>(p[i + 1]) << 8 : 0) |
                            (i + 2 < size ? static_cast<std::uint32_t>(p[i + 2]) : 0);
    out += kAlphabet[b >> 18 & 63];
    out += kAlphabet[b >> 12 & 63];
    out += i + 1 < size ? kAlphabet[b >> 6 & 63] : '=';
    out += i + 2 < size ? kAlphabet[b & 63] : '=';
  }
  return out;
}

template <class T>
std::string base64_of(const std::vector<T>& v) {
  return base64(v.data(), v.size() * sizeof(T));
}

// A figure for the page's JSON: finite numbers as numbers, NaN/Inf as the --json's strings.
json num(double v) {
  if (std::isfinite(v)) return v;
  return log_format::format_double(v);
}

std::optional<std::size_t> series_of(const Result& r, const Pair& p) {
  for (std::size_t i = 0; i < r.series.size(); ++i) {
    const SeriesKey& k = r.series[i].first;
    if (k.kind == p.kind && k.name == p.name && k.mb == p.mb) return i;
  }
  return std::nullopt;
}

// {row, column} of a pair's cell in the heat map, or null.
json cell_of(const Result& r, const PairGrid& grid, const std::vector<std::size_t>& rows,
             const std::optional<Pair>& p) {
  if (!p) return nullptr;
  const auto s = series_of(r, *p);
  if (!s) return nullptr;
  const auto row = std::find(rows.begin(), rows.end(), *s) - rows.begin();
  for (std::size_t x = 0; x < grid.columns().size(); ++x)
    if (grid.columns()[x].first_step <= p->step && p->step <= grid.columns()[x].last_step)
      return {{"row", row}, {"column", x}};
  return nullptr;
}

// A cell's code byte on the page: the class in the low 3 bits, the explanation (GridCell::why,
// at most one per rule and category: kExplanationCount) above them; 255 stays "no record". The
// verdict costs no byte: a 1,000 x 1,000 page stays under 20 MB.
static_assert(kPairClassCount <= 8, "a pair class fits the code byte's low 3 bits");
static_assert(kExplanationCount < 31, "an explanation fits above them, below the absent code 255");
std::uint8_t packed_code(const GridCell& c) {
  if (c.code == GridCell::kAbsent) return c.code;
  return static_cast<std::uint8_t>(c.code | c.why << 3);
}

json rules_json(const PairGrid& grid) {
  json list = json::array();
  for (const auto& rule : grid.rules())
    list.push_back({{"rule", rule_name(rule.rule)}, {"category", rule.bug ? "bug" : "noise"}});
  return list;
}

// The heat map: cell codes with each pair's explanation, relative differences and both sides'
// values (float32: the page shows 7 significant digits; the curves carry full precision),
// row-major in display order.
json grid_json(const Result& r, const PairGrid& grid, const std::vector<std::size_t>& rows) {
  const std::size_t ncols = grid.columns().size();
  std::vector<std::uint8_t> code(rows.size() * ncols);
  std::vector<float> rel(code.size()), base(code.size()), test(code.size());
  for (std::size_t y = 0; y < rows.size(); ++y)
    for (std::size_t x = 0; x < ncols; ++x) {
      const GridCell& c = grid.cell(rows[y], x);
      const std::size_t i = y * ncols + x;
      code[i] = packed_code(c);
      rel[i] = c.rel;
      base[i] = static_cast<float>(c.base);
      test[i] = static_cast<float>(c.test);
    }
  json j;
  j["rows"] = rows;  // indices into report.series
  j["columns"] = ncols;
  j["steps_per_column"] = grid.steps_per_column();
  auto& first = j["first_step"] = json::array();
  auto& last = j["last_step"] = json::array();
  for (const auto& c : grid.columns()) {
    first.push_back(c.first_step);
    last.push_back(c.last_step);
  }
  j["code"] = base64_of(code);
  j["rules"] = rules_json(grid);
  j["rel"] = base64_of(rel);
  j["base"] = base64_of(base);
  j["test"] = base64_of(test);
  j["first_divergence"] = cell_of(r, grid, rows, r.first_divergence);
  j["first_unexplained"] = cell_of(r, grid, rows, r.first_unexplained);
  return j;
}

// Full-precision values of the curve series, one point per column (its shown pair).
json curves_json(const Result& r, const PairGrid& grid) {
  json list = json::array();
  for (std::size_t s : curve_series(r)) {
    json steps = json::array(), base = json::array(), test = json::array();
    for (std::size_t x = 0; x < grid.columns().size(); ++x) {
      const GridCell& c = grid.cell(s, x);
      if (c.code == GridCell::kAbsent) continue;
      steps.push_back(c.step);
      // null: that side has no value (absent or none); NaN/Inf as strings.
      base.push_back(std::isnan(c.base) && c.code != GridCell::kNonfinite ? json(nullptr)
                                                                          : num(c.base));
      test.push_back(std::isnan(c.test) && c.code != GridCell::kNonfinite ? json(nullptr)
                                                                          : num(c.test));
    }
    list.push_back({{"series", s}, {"steps", steps}, {"base", base}, {"test", test}});
  }
  return list;
}

// Keeps the JSON inside <script type="application/json"> from ending it early ("</script>"
// or "<!--" in a name): '<' only occurs in strings, where \u003c means the same.
std::string script_safe(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

std::string html_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::vector<std::size_t> heat_map_rows(const Result& r) {
  // Model order of parameters: the grads' first-seen order (the probe logs them in parameter
  // order at step end); a parameter without a grad record comes after those with one.
  std::unordered_map<std::string, std::size_t> param_order, name_order;
  for (const auto& [k, s] : r.series)
    if (k.kind == Kind::grad) param_order.try_emplace(k.name, param_order.size());
  for (const auto& [k, s] : r.series) {
    if (k.kind == Kind::mb_grad) param_order.try_emplace(k.name, param_order.size());
    name_order.try_emplace(std::string(kind_name(k.kind)) + " " + k.name, name_order.size());
  }
  struct Key {
    int group;
    int sub;           // forward records: their kind (rng, input, output, tap)
    std::size_t name;  // parameter order, or first-seen order of the name
    int kind;          // a parameter's value, then its grad, then its mb_grads
    std::int64_t mb;
    std::size_t index;
    bool operator<(const Key& o) const {
      return std::tie(group, sub, name, kind, mb, index) <
             std::tie(o.group, o.sub, o.name, o.kind, o.mb, o.index);
    }
  };
  std::vector<Key> keys;
  keys.reserve(r.series.size());
  for (std::size_t i = 0; i < r.series.size(); ++i) {
    const SeriesKey& k = r.series[i].first;
    Key key{row_group(k.kind), 0, 0, 0, k.mb.value_or(-1), i};
    const bool of_parameter =
        k.kind == Kind::grad || k.kind == Kind::mb_grad || k.kind == Kind::param;
    if (of_parameter && param_order.count(k.name)) {
      key.name = param_order.at(k.name);
      key.kind = k.kind == Kind::param ? 0 : k.kind == Kind::grad ? 1 : 2;
    } else if (of_parameter) {  // a parameter without a grad record: after those with one
      key.name = param_order.size() + name_order.at(std::string(kind_name(k.kind)) + " " + k.name);
    } else {
      if (key.group == 1) key.sub = forward_kind_order(k.kind);
      key.name = name_order.at(std::string(kind_name(k.kind)) + " " + k.name);
    }
    keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  std::vector<std::size_t> rows;
  rows.reserve(keys.size());
  for (const auto& k : keys) rows.push_back(k.index);
  return rows;
}

std::vector<std::size_t> curve_series(const Result& r, std::size_t max_scalars,
                                      std::size_t max_tensors) {
  std::vector<std::size_t> out;
  auto add = [&](std::size_t i) {
    if (std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
  };
  if (r.first_divergence)
    if (auto s = series_of(r, *r.first_divergence); s && r.first_divergence->kind != Kind::rng)
      add(*s);
  std::size_t scalars = 0;
  for (std::size_t i = 0; i < r.series.size() && scalars < max_scalars; ++i)
    if (r.series[i].first.kind == Kind::scalar) {
      add(i);
      ++scalars;
    }
  // Mismatching tensor norm series with a difference to plot, earliest divergence first (the
  // culprit before its knock-on effects), then first-seen order.
  std::vector<std::size_t> tensors;
  for (std::size_t i = 0; i < r.series.size(); ++i) {
    const auto& [k, s] = r.series[i];
    if (k.kind != Kind::scalar && k.kind != Kind::rng && s.first_divergent_step)
      tensors.push_back(i);
  }
  std::stable_sort(tensors.begin(), tensors.end(), [&](std::size_t a, std::size_t b) {
    return *r.series[a].second.first_divergent_step < *r.series[b].second.first_divergent_step;
  });
  for (std::size_t i = 0; i < tensors.size() && i < max_tensors; ++i) add(tensors[i]);
  return out;
}

std::string html_data_json(const Result& r, const DiffOptions& opt, const PairGrid& grid) {
  json j;
  j["schema"] = "numprobe.diff_logs.html/1";
  j["report"] = json::parse(to_json(r, opt));  // the --json document, as it is
  const auto rows = heat_map_rows(r);
  j["grid"] = grid_json(r, grid, rows);
  j["curves"] = curves_json(r, grid);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool html_report_available() { return html_assets::libraries; }

std::string html_report_unavailable_reason() {
  return "this diff_logs was built without the plotting libraries --html embeds (Debian "
         "packages libjs-chart.js and node-d3): install them (scripts/setup.sh does) and "
         "rebuild";
}

void write_html(const Result& r, const DiffOptions& opt, const PairGrid& grid, std::ostream& out) {
  if (!html_report_available()) throw InputError("--html: " + html_report_unavailable_reason());
  const std::string title = "numprobe diff: " + r.base.path + " vs " + r.test.path;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      << "<meta name=\"generator\" content=\"numprobe diff_logs --html\">\n"
      << "<title>" << html_escape(title) << "</title>\n<style>\n"
      << html_assets::report_css << "</style>\n</head>\n"
      << "<body data-render=\"loading\" data-script-errors=\"0\">\n"
      << "<noscript><p class=\"error\">This report draws its content with JavaScript: "
         "allow scripts for this file.</p></noscript>\n"
      << "<main id=\"app\"></main>\n"
      << "<div id=\"script-errors\" hidden></div>\n"
      << "<script type=\"application/json\" id=\"numprobe-data\">"
      << script_safe(html_data_json(r, opt, grid)) << "</script>\n";
  // Licences travel with the libraries (shown at the page's foot by the script).
  out << "<script type=\"text/plain\" id=\"license-chartjs\">"
      << html_escape(html_assets::chartjs_license)
      << "</script>\n<script type=\"text/plain\" id=\"license-d3\">"
      << html_escape(html_assets::d3_license) << "</script>\n";
  // Errors anywhere (a library, the page's script) land in the DOM: a headless browser's
  // --dump-dom shows them, and so does the page.
  out << "<script>\n"
         "window.numprobeErrors = [];\n"
         "function numprobeError(msg) {\n"
         "  window.numprobeErrors.push(msg);\n"
         "  document.body.setAttribute('data-script-errors', "
         "String(window.numprobeErrors.length));\n"
         "  var box = document.getElementById('script-errors');\n"
         "  box.hidden = false; box.textContent += 'Script error: ' + msg + '\\n';\n"
         "}\n"
         "window.addEventListener('error', function (e) {\n"
         "  numprobeError((e.message || String(e.error || e)) + (e.lineno ? ' (line ' + e.lineno + "
         "')' : ''));\n"
         "});\n"
         "window.addEventListener('unhandledrejection', function (e) { numprobeError('unhandled "
         "rejection: ' + e.reason); });\n"
         "(function () {\n"
         "  var original = console.error;\n"
         "  console.error = function () {\n"
         "    numprobeError('console.error: ' + Array.prototype.join.call(arguments, ' '));\n"
         "    return original.apply(console, arguments);\n"
         "  };\n"
         "})();\n</script>\n";
  out << "<script>\n" << html_assets::d3 << "\n</script>\n";
  out << "<script>\n" << html_assets::chartjs << "\n</script>\n";
  out << "<script>\n" << html_assets::report_js << "\n</script>\n</body>\n</html>\n";
}

}  // namespace probe::differ
