// A run's directory when ProbeOptions::run_dir is empty: the next free <output_root>/<N>, the same
// N for every rank of one launch.
#pragma once

#include <filesystem>

namespace probe {

// The next free <root>/<N>, agreed by all ranks of a launch without communication (run_dir.cpp).
// Throws std::runtime_error naming a directory that cannot be made.
std::filesystem::path next_free_run_dir(const std::filesystem::path& root);

}  // namespace probe
