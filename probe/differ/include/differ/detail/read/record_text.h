// Short texts of records for issue messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "probe/record.h"

namespace probe::differ {

// "hash=... norm=..." (with nan/inf when any), "value=...", "none" or "unsupported=...".
std::string record_brief(const Record& r);
// "[4,2]": a shape, as the log writes it.
std::string dims_text(const std::vector<std::int64_t>& dims);
// "grad layers.0.w" / "mb_grad layers.0.w mb=3".
std::string key_text(Kind kind, const std::string& name, std::optional<std::int64_t> mb);

}  // namespace probe::differ
