#include "node/fncall/languages.h"

namespace warren::fncall {
namespace {

const std::vector<Language>& All() {
  static const std::vector<Language> langs = {
      {"python", "main.py", {}, {}, {"python3", "main.py"}, true, true, 0},
      {"bash", "main.sh", {}, {}, {"bash", "main.sh"}, false, true, 0},
      {"sh", "main.sh", {}, {}, {"sh", "main.sh"}, false, true, 0},
      {"c",
       "main.c",
       {"gcc", "-O2", "-pipe", "-std=gnu17", "-o", "main", "main.c", "-lm"},
       {"main"},
       {"./main"},
       false,
       true,
       0},
      {"cpp",
       "main.cpp",
       {"g++", "-O2", "-pipe", "-std=gnu++17", "-o", "main", "main.cpp"},
       {"main"},
       {"./main"},
       false,
       true,
       0},
      {"javascript", "main.js", {}, {}, {"node", "main.js"}, false, false, 0},
      {"java",
       "Main.java",
       {"javac", "-J-Xmx512m", "-J-XX:+UseSerialGC", "Main.java"},
       {"*.class"},
       {"java", "-Xmx{memory_mb}m", "-Xss64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "Main"},
       false,
       false,
       256},
  };
  return langs;
}

}  // namespace

std::optional<Language> FindLanguage(const std::string& name) {
  std::string n = name == "c++"                    ? "cpp"
                  : name == "node" || name == "js" ? "javascript"
                  : name == "python3"              ? "python"
                                                   : name;
  for (const Language& l : All())
    if (l.name == n) return l;
  return std::nullopt;
}

std::vector<std::string> LanguageNames() {
  std::vector<std::string> out;
  for (const Language& l : All()) out.push_back(l.name);
  return out;
}

}  // namespace warren::fncall
