// warren call --lang LANG (--code FILE | -) [--stdin FILE] [--timeout SECS]: run a snippet of
// code in the fncall backend (POST /v1/calls) and print what it printed. With --cases, judge
// it: one line per case with its verdict, exit 0 only if every case passed.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/common.h"

namespace warren::cli {
namespace {

struct CallFlags {
  std::string lang, code, stdin_file, cases, compare, image, memory;
  double timeout = 0;
  bool json = false;
  std::vector<std::string> args;
};

Result<std::string> ReadInput(const std::string& path, const char* what) {
  std::ostringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return ErrnoStatus(std::string("read ") + what, path);
  ss << f.rdbuf();
  return ss.str();
}

int RunCall(const CallFlags& f) {
  if (f.code.empty()) return Fail("call", "give the code: --code FILE, or --code - to read stdin");
  auto code = ReadInput(f.code, "code");
  if (!code.ok()) return Fail(code.status());
  nlohmann::json body = {{"language", f.lang}, {"code", *code}};
  if (!f.stdin_file.empty()) {
    if (f.stdin_file == "-" && f.code == "-")
      return Fail("call", "only one of --code and --stdin can be -");
    auto in = ReadInput(f.stdin_file, "stdin");
    if (!in.ok()) return Fail(in.status());
    body["stdin"] = *in;
  }
  if (!f.cases.empty()) {
    auto text = ReadInput(f.cases, "cases");
    if (!text.ok()) return Fail(text.status());
    auto cases = nlohmann::json::parse(*text, nullptr, false);
    if (cases.is_object() && cases.contains("cases")) cases = cases["cases"];
    if (!cases.is_array())
      return Fail("call", "--cases FILE must hold a JSON list of {stdin, expected}");
    body["cases"] = cases;
  }
  if (!f.compare.empty()) body["compare"] = f.compare;
  if (!f.image.empty()) body["image"] = f.image;
  if (f.timeout > 0) body["timeout_s"] = f.timeout;
  if (!f.memory.empty()) {
    auto mb = SizeMb(f.memory, "--memory");
    if (!mb.ok()) return Fail(mb.status());
    body["memory_mb"] = *mb;
  }
  if (!f.args.empty()) body["args"] = f.args;
  auto r = Client().Request("POST", "/v1/calls", body.dump());
  if (!r.ok()) return Fail(r.status());
  if (Status st = client::ToStatus(*r, "call"); !st.ok()) return Fail(st);
  auto res = nlohmann::json::parse(r->body, nullptr, false);
  if (!res.is_object()) return Fail("call", "unreadable reply from the server");
  if (f.json) {
    std::cout << res.dump(2) << "\n";
    return res.value("verdict", "") == "ok" ? 0 : 1;
  }
  const std::string verdict = res.value("verdict", "");
  if (verdict == "compile_error") {
    std::cerr << res["compile"].value("stderr", "") << "warren: compile error\n";
    return 1;
  }
  if (res.contains("cases") && res["cases"].is_array()) {
    int passed = 0, n = 0;
    for (const auto& c : res["cases"]) {
      ++n;
      std::string v = c.value("verdict", "");
      passed += v == "passed";
      std::printf("case %-4d %-14s %6lld ms %6lld ms cpu %8lld KiB\n", n, v.c_str(),
                  static_cast<long long>(c.value("duration_ms", 0)),
                  static_cast<long long>(c.value("cpu_ms", 0)),
                  static_cast<long long>(c.value("memory_peak_kb", 0)));
    }
    std::printf("%d/%d passed\n", passed, n);
    return passed == n ? 0 : 1;
  }
  std::cout << res.value("stdout", "");
  std::cout.flush();
  std::cerr << res.value("stderr", "");
  if (verdict != "ok") std::cerr << "warren: " << verdict << "\n";
  if (verdict == "time_limit") return 124;
  if (res.contains("signal") && res["signal"].is_string()) return 128 + 9;
  int code_out = res.value("exit_code", 1);
  return verdict == "ok" || verdict == "runtime_error" ? (code_out < 0 ? 1 : code_out) : 1;
}

}  // namespace

void AddCall(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("call", "run code in the fncall backend (compile once, run, judge)");
  auto f = std::make_shared<CallFlags>();
  cmd->add_option("--lang,--language", f->lang, "python, bash, c, cpp, ... (see GET /v1/nodes)")
      ->required();
  cmd->add_option("--code", f->code, "file with the code, or - for stdin");
  // `warren call --lang python -`: the code from stdin, as `--code -`.
  auto* dash = cmd->add_option("source", f->code, "- : the code from stdin (as --code -)");
  dash->check([](const std::string& v) {
    return v == "-" ? std::string() : "give the code with --code FILE, or - for stdin";
  });
  dash->excludes(cmd->get_option("--code"));
  cmd->add_option("--stdin", f->stdin_file, "file given to the program as its stdin (- for ours)");
  cmd->add_option("--timeout", f->timeout, "seconds of wall and CPU time per run (default 10)");
  cmd->add_option("--memory", f->memory, "memory limit per run, e.g. 256M (default 256M)");
  cmd->add_option("--cases", f->cases, "JSON file: [{\"stdin\": ..., \"expected\": ...}, ...]");
  cmd->add_option("--compare", f->compare, "exact (default) or whitespace");
  cmd->add_option("--image", f->image,
                  "runner image NAME:TAG (default: the server's --fncall-image)");
  Repeatable(cmd->add_option("--arg", f->args, "an argument for the program (repeatable)"));
  cmd->add_flag("--json", f->json, "print the whole CallResult as JSON");
  cmd->callback([f] { ExitCode() = RunCall(*f); });
}

}  // namespace warren::cli
