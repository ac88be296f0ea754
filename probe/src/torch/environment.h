// The probe's settings from the environment (ProbeOptions::from_env, the run directory's launch
// id): a variable set to the empty string counts as unset.
#pragma once

#include <cstdlib>

namespace probe {

// The variable's value, or null where it is unset or empty.
inline const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

}  // namespace probe
