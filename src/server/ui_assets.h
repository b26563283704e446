// The dashboard's files (ui/), built into the binary by cmake/embed_ui.cmake.
#pragma once

#include <string_view>
#include <vector>

namespace warren::server {

struct UiAsset {
  std::string_view name;  // "index.html", "app.js": a file of ui/
  std::string_view content_type;
  std::string_view data;
};

const std::vector<UiAsset>& UiAssets();

}  // namespace warren::server
