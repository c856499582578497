// JsonString: a string as a JSON string literal, quotes included, with `"`, `\` and control
// characters escaped: what every JSON file Syncline writes (summary.json, the trace, the
// Prometheus target list) uses for text it did not choose itself.
//
// Thread-safety: a pure function.
#ifndef SYNCLINE_CORE_JSON_STRING_H_
#define SYNCLINE_CORE_JSON_STRING_H_

#include <string>
#include <string_view>

namespace syncline {

std::string JsonString(std::string_view text);

}  // namespace syncline

#endif  // SYNCLINE_CORE_JSON_STRING_H_
