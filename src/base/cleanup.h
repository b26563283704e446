// Cleanup: runs a function at scope exit unless cancelled. Arm the rollback of each step
// of a creation before doing the next; cancel them all once the whole thing succeeded.
#pragma once

#include <functional>
#include <utility>

namespace warren {

class Cleanup {
 public:
  Cleanup() = default;
  explicit Cleanup(std::function<void()> fn) : fn_(std::move(fn)) {}
  Cleanup(Cleanup&& o) noexcept : fn_(std::exchange(o.fn_, nullptr)) {}
  Cleanup& operator=(Cleanup&& o) noexcept {
    if (this != &o) {
      Run();
      fn_ = std::exchange(o.fn_, nullptr);
    }
    return *this;
  }
  Cleanup(const Cleanup&) = delete;
  Cleanup& operator=(const Cleanup&) = delete;
  ~Cleanup() { Run(); }

  void Cancel() { fn_ = nullptr; }
  void Run() {
    if (fn_) std::exchange(fn_, nullptr)();
  }

 private:
  std::function<void()> fn_;
};

}  // namespace warren
