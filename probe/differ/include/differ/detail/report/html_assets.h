// --html's page assets, embedded at build time (cmake/embed_assets.cmake writes their source):
// the page's script and stylesheet, and the plotting libraries with their licences, read from
// Debian's packages (libjs-chart.js, node-d3).
#pragma once

#include <string_view>

namespace probe::differ::html_assets {
extern const std::string_view report_js, report_css;
extern const std::string_view chartjs, chartjs_license;  // Chart.js (MIT/Expat)
extern const std::string_view d3, d3_license;            // D3 (BSD-3-Clause)
extern const bool libraries;  // false: the libraries were not found at configure time
}  // namespace probe::differ::html_assets
