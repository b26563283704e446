// A Python worker's request as the dispatcher writes it (runtime/fncall/zygote_request.h): the
// part the C zygote applies before any Python runs (files, cwd, limits) and a marshal'd dict
// with what only Python needs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace warren::agent {

// `req`: the run's request (mode, code, args, filename, env, files [{name, len, mode}], limits,
// cwd), `files_data` the files' bytes in order. A file whose `len` runs past them is cut short.
std::string EncodePythonRequest(const nlohmann::json& req, std::string_view files_data);

}  // namespace warren::agent
