// Python's marshal format (version 4) for JSON values: what the fncall dispatcher sends a
// Python worker its request in (see runtime/fncall/zygote.py, worker_run), as a forked
// interpreter touches fewer pages to load it than to parse JSON. Objects become dicts, arrays
// lists, strings str, integers int (of any size), floats float, null None. Only for a reader
// that trusts the writer: marshal is not hardened against hostile input.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace warren::agent {

// Appends `v`, marshal'd.
void PutMarshal(const nlohmann::json& v, std::string* out);
// Appends a dict of `obj`'s members and, if `bytes_key` is not empty, `bytes_key`: bytes(`bytes`).
void PutMarshalDict(const nlohmann::json& obj, std::string_view bytes_key, std::string_view bytes,
                    std::string* out);

}  // namespace warren::agent
