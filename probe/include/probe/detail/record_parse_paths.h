// The two paths of log_format::parse_record_into, apart for the test that checks they agree.
// Not for trainers: parse_record_into is the reader.
#pragma once

#include <string_view>

#include "probe/record.h"

namespace probe::log_format {

// The first reads a record whose fields are in the order format_record writes them, in one pass; it
// returns false for any other line (another order, a %-escaped value, NaN or Inf figures, op and
// `none` records, a value the second would reject), leaving `out` unspecified. The second reads
// fields in any order and throws ParseError for a line that is not a record. Where the first reads
// a record, the second reads the same.
bool parse_in_writer_order(std::string_view line, Record& out);
void parse_any_order_into(std::string_view line, Record& out);

}  // namespace probe::log_format
