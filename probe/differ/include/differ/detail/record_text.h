// Short texts of records for issue messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "probe/record.h"

namespace probe::differ {

// "hash=... norm=..." (with nan/inf when any), "value=...", "none" or "unsupported=...".
std::string record_brief(const Record& r);
// "grad layers.0.w" / "mb_grad layers.0.w mb=3".
std::string key_text(Kind kind, const std::string& name, std::optional<std::int64_t> mb);

}  // namespace probe::differ
