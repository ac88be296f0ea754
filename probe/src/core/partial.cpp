#include "probe/partial.h"

#include <stdexcept>

namespace probe {

Partial Partial::of(std::int64_t index, std::int64_t count, const std::string& what) {
  if (count < 1 || index < 0 || index >= count)
    throw std::invalid_argument(what + ": summand " + std::to_string(index) + " of " +
                                std::to_string(count) + " (expected 0 <= index < count)");
  return Partial{index, count};
}

}  // namespace probe
